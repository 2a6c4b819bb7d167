use super::*;
use crate::{PermissionReply, PermissionRequest, Tool};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const PAGE: &str = "<html><head><title>T</title><style>p{}</style></head><body><h1>Guide</h1><p>Hello <b>world</b>.</p><script>alert(1)</script><ul><li>one</li><li>two</li></ul></body></html>";

/// A one-file HTTP/1.1 server on 127.0.0.1 answering by path; returns its base URL.
async fn server() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let n = sock.read(&mut buf).await.unwrap_or(0);
                let req = String::from_utf8_lossy(&buf[..n]).to_string();
                let path = req.split_whitespace().nth(1).unwrap_or("/").to_string();
                let ua_troupe = req.to_ascii_lowercase().contains("user-agent: troupe\r\n");
                let (status, extra, ctype, body): (&str, &str, &str, Vec<u8>) = match path.as_str()
                {
                    "/page" => ("200 OK", "", "text/html; charset=utf-8", PAGE.into()),
                    "/plain" => ("200 OK", "", "text/plain", b"just text".to_vec()),
                    "/png" => ("200 OK", "", "image/png", vec![0x89, b'P', b'N', b'G']),
                    "/missing" => ("404 Not Found", "", "text/plain", b"no".to_vec()),
                    "/big" => (
                        "200 OK",
                        "",
                        "text/plain",
                        vec![b'a'; MAX_RESPONSE_BYTES + 1],
                    ),
                    "/cf" if !ua_troupe => (
                        "403 Forbidden",
                        "cf-mitigated: challenge\r\n",
                        "text/html",
                        b"challenge".to_vec(),
                    ),
                    "/cf" => ("200 OK", "", "text/plain", b"passed".to_vec()),
                    "/slow" => {
                        // Never answers: only the client's timeout ends the call.
                        std::future::pending::<(&str, &str, &str, Vec<u8>)>().await
                    }
                    "/bigstream" => {
                        // No Content-Length: the cap must hold while the body streams.
                        let _ = sock
                            .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\nconnection: close\r\n\r\n")
                            .await;
                        let chunk = vec![b'a'; 64 * 1024];
                        for _ in 0..(MAX_RESPONSE_BYTES / chunk.len() + 2) {
                            if sock.write_all(&chunk).await.is_err() {
                                return;
                            }
                        }
                        return;
                    }
                    _ => ("404 Not Found", "", "text/plain", Vec::new()),
                };
                let head = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: {ctype}\r\n{extra}content-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = sock.write_all(head.as_bytes()).await;
                let _ = sock.write_all(&body).await;
            });
        }
    });
    format!("http://{addr}")
}

async fn call(args: Value) -> Result<ToolOutput, ToolError> {
    WebFetchTool.execute(args, ToolContext::simple("/")).await
}

#[tokio::test]
async fn html_as_markdown_text_and_html() {
    let base = server().await;
    let md = call(json!({"url": format!("{base}/page")})).await.unwrap();
    assert!(md.output.contains("# Guide"), "{}", md.output);
    assert!(md.output.contains("Hello **world**."), "{}", md.output);
    assert!(!md.output.contains("alert"), "{}", md.output);
    assert!(md.title.contains("text/html"), "{}", md.title);
    let text = call(json!({"url": format!("{base}/page"), "format": "text"}))
        .await
        .unwrap();
    assert_eq!(text.output, "Guide\nHello world.\none\ntwo");
    let html = call(json!({"url": format!("{base}/page"), "format": "html"}))
        .await
        .unwrap();
    assert_eq!(html.output, PAGE);
    let plain = call(json!({"url": format!("{base}/plain")})).await.unwrap();
    assert_eq!(plain.output, "just text");
}

#[tokio::test]
async fn refusals_name_the_cause() {
    let base = server().await;
    let e = call(json!({"url": "file:///etc/passwd"}))
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("must start with http:// or https://"),
        "{e}"
    );
    let e = call(json!({"url": "http://"})).await.unwrap_err();
    assert!(e.to_string().contains("not a valid URL"), "{e}");
    let e = call(json!({"url": format!("{base}/missing")}))
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "Request failed with status code: 404");
    let e = call(json!({"url": format!("{base}/png")}))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("image/png"), "{e}");
    let e = call(json!({"url": format!("{base}/big")}))
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "Response too large (exceeds 5 MB limit)");
    let e = call(json!({"url": format!("{base}/bigstream")}))
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "Response too large (exceeds 5 MB limit)");
    let e = call(json!({"url": format!("{base}/slow"), "timeout": 1}))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("timed out after 1 s"), "{e}");
    let e = call(json!({"url": format!("{base}/plain"), "format": "pdf"}))
        .await
        .unwrap_err();
    assert!(matches!(e, ToolError::InvalidArguments { .. }), "{e}");
}

#[tokio::test]
async fn cloudflare_challenge_is_retried_with_the_plain_agent() {
    let base = server().await;
    let out = call(json!({"url": format!("{base}/cf")})).await.unwrap();
    assert_eq!(out.output, "passed");
}

#[tokio::test]
async fn permission_is_asked_with_the_url_and_a_denial_fetches_nothing() {
    struct Deny(std::sync::Mutex<Vec<PermissionRequest>>);
    impl crate::PermissionAsker for Deny {
        fn ask(&self, req: PermissionRequest) -> BoxFuture<'static, PermissionReply> {
            self.0.lock().unwrap().push(req);
            Box::pin(async { PermissionReply::Deny("no web".into()) })
        }
    }
    let asker = std::sync::Arc::new(Deny(Default::default()));
    let mut ctx = ToolContext::simple("/");
    ctx.permissions = asker.clone();
    let e = WebFetchTool
        .execute(json!({"url": "http://127.0.0.1:1/x"}), ctx)
        .await
        .unwrap_err();
    assert_eq!(e, ToolError::PermissionDenied("no web".into()));
    let reqs = asker.0.lock().unwrap();
    assert_eq!(reqs[0].permission, "webfetch");
    assert_eq!(reqs[0].patterns, vec!["http://127.0.0.1:1/x".to_string()]);
    assert_eq!(reqs[0].always, vec!["*".to_string()]);
}
