//! Shared rate limits: a 429 seen by one session holds back the other sessions' requests to
//! the same provider until the retry time, so a batch does not hammer a limited endpoint.

mod support;

use std::time::Duration;

use support::*;
use troupe_testkit::{Conversation, Fault, Script, Step};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_to_one_session_holds_back_the_others() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Session A's first attempt gets 429 with retry-after 1 s; B has no fault but starts
    // its request while A is backing off.
    let script = Script::new(vec![
        Conversation::new(vec![
            Step::text("A done").with_fault(Fault::rate_limited(1)),
        ])
        .matching("SESSION-A"),
        Conversation::new(vec![Step::text("B done")]).matching("SESSION-B"),
    ]);
    let server = start_mock(script).await;
    let runtime = start_runtime(&dir, &server.base_url()).await;
    let a = new_session(&runtime, dir.path()).await;
    let b = new_session(&runtime, dir.path()).await;
    let mut bus = runtime.bus().subscribe();
    let ta = spawn_turn(&runtime, &a, prompt("SESSION-A"));
    // Wait until A has seen its 429 (its status turns to `retry`), then start B.
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if let Ok(ev) = bus.recv().await
                && let troupe_session::Event::SessionStatus {
                    status: troupe_session::SessionStatus::Retry { .. },
                    ..
                } = &*ev
            {
                break;
            }
        }
    })
    .await
    .expect("A's retry status");
    let tb = spawn_turn(&runtime, &b, prompt("SESSION-B"));
    let ra = ta.await.expect("join a").expect("turn a");
    let rb = tb.await.expect("join b").expect("turn b");
    assert_eq!(ra.text, "A done");
    assert_eq!(rb.text, "B done");
    let reqs = server.requests();
    let limited = reqs.iter().find(|r| r.status == 429).expect("the 429");
    let b_req = reqs
        .iter()
        .find(|r| r.conversation == Some(1))
        .expect("B's request");
    let limited_end = limited.end_ms.expect("429 finished");
    // B was asked for ~immediately after the 429 but waited for the shared back-off (1 s).
    assert!(
        b_req.start_ms >= limited_end + 900,
        "B's request started {} ms after A's 429; expected to wait ~1000 ms",
        b_req.start_ms - limited_end
    );
    server.shutdown().await;
}
