//! The one client of a `troupe serve` a test started: JSON requests that answer with the
//! status and the body, and the session calls most tests begin with.

use serde_json::{Value, json};

/// A client of the server at `base` (e.g. `http://127.0.0.1:PORT`), sending `password` as a
/// bearer token when there is one.
pub struct Api {
    /// The server's base URL, without a trailing slash.
    pub base: String,
    /// The HTTP client (one connection pool for the test).
    pub http: reqwest::Client,
    /// The server's password, if it has one.
    pub password: Option<String>,
}

impl Api {
    /// A client of the server at `base` that has no password.
    pub fn new(base: &str) -> Api {
        Api::with_password(base, None)
    }

    /// A client of the server at `base` sending `password` (if any) as a bearer token.
    pub fn with_password(base: &str, password: Option<String>) -> Api {
        Api {
            base: base.to_string(),
            http: reqwest::Client::new(),
            password,
        }
    }

    /// A request `method path` (the path starts with `/`), with the password if any.
    pub fn req(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let b = self.http.request(method, format!("{}{path}", self.base));
        match &self.password {
            Some(p) => b.bearer_auth(p),
            None => b,
        }
    }

    /// Sends `method path` with `body` as JSON (if any); the status and the JSON body
    /// (`null` when the body is not JSON, e.g. empty).
    pub async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut r = self.req(method.clone(), path);
        if let Some(b) = body {
            r = r.json(&b);
        }
        let r = r
            .send()
            .await
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    /// `GET path`: status and JSON body (see [`Api::send`]).
    pub async fn get(&self, path: &str) -> (u16, Value) {
        self.send(reqwest::Method::GET, path, None).await
    }

    /// `GET path` whose body must be JSON (any status); the body.
    pub async fn get_json(&self, path: &str) -> Value {
        self.req(reqwest::Method::GET, path)
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {path}: {e}"))
            .json()
            .await
            .unwrap_or_else(|e| panic!("GET {path}: not JSON: {e}"))
    }

    /// `POST path` with the JSON `body`: status and JSON body (see [`Api::send`]).
    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.send(reqwest::Method::POST, path, Some(body)).await
    }

    /// `PATCH path` with the JSON `body`: status and JSON body (see [`Api::send`]).
    pub async fn patch(&self, path: &str, body: Value) -> (u16, Value) {
        self.send(reqwest::Method::PATCH, path, Some(body)).await
    }

    /// A new session (`POST /session {}`, which must answer 200); its id.
    pub async fn new_session(&self) -> String {
        let (status, s) = self.post("/session", json!({})).await;
        assert_eq!(status, 200, "{s}");
        s["id"].as_str().expect("session id").to_string()
    }

    /// Starts prompt `text` in session `sid` without waiting for its turn (`POST
    /// /session/{sid}/prompt_async`); the server must accept it (204).
    pub async fn prompt_async(&self, sid: &str, text: &str) {
        let (status, body) = self
            .post(
                &format!("/session/{sid}/prompt_async"),
                json!({"text": text}),
            )
            .await;
        assert_eq!(status, 204, "{body}");
    }
}
