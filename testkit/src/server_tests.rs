use super::*;
use crate::script::Step;

async fn post(server: &MockServer, first_user: &str, session: &str) -> u16 {
    let body = json!({"model": "m", "stream": true,
        "messages": [{"role": "user", "content": first_user}]});
    let resp = reqwest::Client::new()
        .post(format!("{}/chat/completions", server.base_url()))
        .header("x-session-affinity", session)
        .json(&body)
        .send()
        .await
        .expect("send");
    let status = resp.status().as_u16();
    let _ = resp.text().await.expect("body");
    status
}

#[tokio::test]
async fn bodies_are_kept_by_default_and_dropped_when_switched_off() {
    let server = MockServer::start(Script::single(vec![Step::text("hi")]))
        .await
        .expect("start");
    assert_eq!(post(&server, "first", "ses_a").await, 200);
    server.set_record_bodies(false);
    assert_eq!(post(&server, "second", "ses_b").await, 200);
    // The finish guard runs when the body stream ends; give it a moment.
    for _ in 0..100 {
        if server.requests().iter().all(|r| r.end_ms.is_some()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let recs = server.requests();
    assert_eq!(recs.len(), 2);
    assert_eq!(recs[0].body["messages"][0]["content"], "first");
    assert_eq!(recs[1].body, Value::Null);
    // The summary survives.
    assert_eq!(recs[1].session_key, "ses_b");
    assert_eq!(
        (recs[1].seq, recs[1].step, recs[1].status),
        (1, Some(0), 200)
    );
    assert!(recs[1].end_ms.is_some_and(|e| e >= recs[1].start_ms));
    server.shutdown().await;
}
