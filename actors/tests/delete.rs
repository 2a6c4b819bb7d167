//! Deleting a session while its turn runs (`DELETE /session/{id}` right after
//! `prompt_async`): the turn is aborted and the session deleted after the turn closed its
//! parts, so no write reaches the store for rows that are gone (a foreign-key failure would
//! fail the store writer's whole batch and the next flush).

mod support;

use support::*;
use troupe_testkit::Script;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_busy_session_waits_for_its_aborted_turn() {
    let (dir, root) = scratch();
    let script = Script::new(vec![sleeping("BUSY")]);
    let server = start_mock(script).await;
    let runtime = start_runtime(&dir, &server.base_url()).await;
    // Several sessions, so other sessions' writes share the writer's batches.
    let mut sids = Vec::new();
    for _ in 0..4 {
        sids.push(new_session(&runtime, &root).await);
    }
    let turns: Vec<_> = sids
        .iter()
        .map(|s| spawn_prompt(&runtime, s, "BUSY: sleep"))
        .collect();
    // Each turn is inside its tool call.
    for sid in &sids {
        let sid = sid.clone();
        let rt2 = runtime.clone();
        wait_until("the tool call to run", move || {
            let tree = serde_json::to_string(&rt2.actors()).unwrap_or_default();
            tree.contains(sid.as_str()) && tree.contains("test_sleep")
        })
        .await;
    }
    for sid in &sids {
        assert!(runtime.delete_session(sid).await.expect("delete"), "{sid}");
    }
    for t in turns {
        let turn = t.await.expect("turn task");
        assert!(turn.error.is_some(), "{turn:?}");
    }
    // Nothing the aborted turns wrote failed in the store.
    runtime
        .store()
        .flush()
        .await
        .expect("the store writer saw no failed write");
    for sid in &sids {
        let key = sid.clone();
        assert!(
            runtime
                .store()
                .read(move |r| r.session(&key))
                .await
                .expect("read")
                .is_none(),
            "{sid} still stored"
        );
    }
    runtime.shutdown().await;
    server.shutdown().await;
}
