//! A small client of this API (used by `troupe run --attach`): JSON calls with the password
//! as a bearer token, and `/event` as a stream of JSON values.

use std::time::Duration;

use eventsource_stream::Eventsource;
use futures::{Stream, StreamExt};
use serde_json::Value;

/// Client errors, one line each.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server could not be reached or the transfer failed.
    #[error("{url}: {}", if err.is_connect() { "cannot connect (is `troupe serve` running there?)".to_string() } else { err.to_string() })]
    Http {
        /// Request URL.
        url: String,
        /// Why the request failed (connection refused, timeout, …).
        err: reqwest::Error,
    },
    /// The server answered an error.
    #[error("{url}: HTTP {status}: {message}")]
    Status {
        /// Request URL.
        url: String,
        /// HTTP status.
        status: u16,
        /// The server's `error.message`, else the body.
        message: String,
    },
    /// The event stream broke or sent something that is not JSON.
    #[error("event stream: {0}")]
    Stream(String),
    /// Bad base URL.
    #[error("invalid server URL {0:?}: expected http://host:port")]
    BadUrl(String),
}

/// A client of one server.
#[derive(Debug, Clone)]
pub struct Client {
    base: String,
    password: Option<String>,
    http: reqwest::Client,
}

impl Client {
    /// A client of the server at `base` (`http://host:port`), sending `password` if given.
    pub fn new(base: &str, password: Option<String>) -> Result<Client, ClientError> {
        let base = base.trim_end_matches('/').to_string();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(ClientError::BadUrl(base));
        }
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|err| ClientError::Http {
                url: base.clone(),
                err,
            })?;
        Ok(Client {
            base,
            password: password.filter(|p| !p.is_empty()),
            http,
        })
    }

    fn req(&self, method: reqwest::Method, path: &str) -> (String, reqwest::RequestBuilder) {
        let url = format!("{}{path}", self.base);
        let mut b = self.http.request(method, &url);
        if let Some(p) = &self.password {
            b = b.bearer_auth(p);
        }
        (url, b)
    }

    async fn send(url: &str, b: reqwest::RequestBuilder) -> Result<reqwest::Response, ClientError> {
        let resp = b.send().await.map_err(|err| ClientError::Http {
            url: url.to_string(),
            err,
        })?;
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        let text = resp.text().await.unwrap_or_default();
        let message = serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|v| v["error"]["message"].as_str().map(str::to_string))
            .unwrap_or(text);
        Err(ClientError::Status {
            url: url.to_string(),
            status: status.as_u16(),
            message,
        })
    }

    async fn json(url: &str, resp: reqwest::Response) -> Result<Value, ClientError> {
        if resp.status() == reqwest::StatusCode::NO_CONTENT {
            return Ok(Value::Null);
        }
        resp.json().await.map_err(|err| ClientError::Http {
            url: url.to_string(),
            err,
        })
    }

    /// `GET path` → JSON.
    pub async fn get(&self, path: &str) -> Result<Value, ClientError> {
        let (url, b) = self.req(reqwest::Method::GET, path);
        let resp = Self::send(&url, b).await?;
        Self::json(&url, resp).await
    }

    /// `POST path` with a JSON body → JSON (`null` for 204).
    pub async fn post(&self, path: &str, body: &Value) -> Result<Value, ClientError> {
        let (url, b) = self.req(reqwest::Method::POST, path);
        let resp = Self::send(&url, b.json(body)).await?;
        Self::json(&url, resp).await
    }

    /// Subscribe to `/event`: each item is one event's JSON (`{"type", "properties"}`),
    /// starting with `server.connected`. Returns once the server accepted the subscription.
    pub async fn events(
        &self,
    ) -> Result<impl Stream<Item = Result<Value, ClientError>> + Send + 'static, ClientError> {
        let (url, b) = self.req(reqwest::Method::GET, "/event");
        let resp = Self::send(&url, b.header("accept", "text/event-stream")).await?;
        Ok(resp.bytes_stream().eventsource().map(|r| match r {
            Ok(ev) => serde_json::from_str::<Value>(&ev.data)
                .map_err(|e| ClientError::Stream(format!("bad event JSON: {e}"))),
            Err(e) => Err(ClientError::Stream(e.to_string())),
        }))
    }
}
