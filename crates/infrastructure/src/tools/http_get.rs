//! `http_get`: fetches a URL over HTTP(S) and returns its status and body.
//!
//! Never granted by default: it reaches whatever this machine can reach,
//! local services included, so an agent gets it only when its `tools:` lists
//! it. Only `http` and `https` URLs are fetched (no `file:` or other schemes);
//! the body is read chunk by chunk and cut at a size cap so a large download
//! neither floods the model's context nor memory; and a non-2xx status is a
//! result, not a tool error, because the model should see the status.
//! Error messages never repeat the URL, which may carry credentials.

use std::time::Duration;

use application::ports::{Tool, ToolContext, ToolError, ToolSpec};
use application::tools::lossy_text;
use async_trait::async_trait;
use serde_json::{Value, json};

/// Default time for the whole fetch, body included.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// Default bytes of body kept; the rest is not downloaded.
const DEFAULT_MAX_BYTES: usize = 1024 * 1024;

/// Fetches a URL with GET.
#[derive(Debug)]
pub struct HttpGet {
    /// Built at the first call (a run that never fetches pays nothing) and
    /// kept so connections are pooled across calls; an error is kept too and
    /// reported per call rather than making anything fallible.
    client: std::sync::OnceLock<Result<reqwest::Client, String>>,
    timeout: Duration,
    max_bytes: usize,
}

impl HttpGet {
    /// A 30 s timeout and at most 1 MiB of body.
    pub fn new() -> Self {
        Self::with_limits(DEFAULT_TIMEOUT, DEFAULT_MAX_BYTES)
    }

    /// `timeout` bounds the whole fetch, body included; at most `max_bytes`
    /// of body are kept.
    pub fn with_limits(timeout: Duration, max_bytes: usize) -> Self {
        Self {
            client: std::sync::OnceLock::new(),
            timeout,
            max_bytes,
        }
    }

    fn client(&self) -> Result<&reqwest::Client, ToolError> {
        self.client
            .get_or_init(|| {
                // reqwest is built without a default crypto provider (ring
                // is lighter to build than aws-lc); an earlier install is fine.
                let _ = rustls::crypto::ring::default_provider().install_default();
                reqwest::Client::builder()
                    .user_agent(concat!("awr/", env!("CARGO_PKG_VERSION")))
                    .build()
                    .map_err(|e| e.without_url().to_string())
            })
            .as_ref()
            .map_err(|e| ToolError::Failed(format!("cannot build the HTTP client: {e}")))
    }

    /// Sends the request and reads at most `max_bytes` of the body.
    async fn fetch(
        &self,
        client: &reqwest::Client,
        url: reqwest::Url,
    ) -> Result<Value, reqwest::Error> {
        let mut response = client.get(url).send().await?;
        let status = response.status().as_u16();
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
        let mut body = Vec::new();
        let mut truncated = false;
        while let Some(chunk) = response.chunk().await? {
            let room = self.max_bytes.saturating_sub(body.len());
            if chunk.len() > room {
                body.extend_from_slice(&chunk[..room]);
                truncated = true;
                // Dropping the response abandons the rest of the download.
                break;
            }
            body.extend_from_slice(&chunk);
        }
        Ok(json!({
            "status": status,
            "content_type": content_type,
            "body": lossy_text(body, truncated),
            "truncated": truncated,
        }))
    }
}

impl Default for HttpGet {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl Tool for HttpGet {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "http_get".into(),
            description: "Fetch an http:// or https:// URL with GET. Returns the status, \
                          content type and body as text (truncated past a size limit)."
                .into(),
            input_schema: json!({"type": "object", "required": ["url"], "additionalProperties": false,
                "properties": {"url": {"type": "string", "description": "Absolute http:// or https:// URL"}}}),
        }
    }

    async fn call(&self, input: Value, _context: &ToolContext) -> Result<Value, ToolError> {
        let url = input["url"].as_str().unwrap_or_default();
        let url = reqwest::Url::parse(url)
            .map_err(|e| ToolError::Failed(format!("not a valid URL: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(ToolError::Denied(format!(
                "`{}:` URLs are not fetched; only http and https",
                url.scheme()
            )));
        }
        let client = self.client()?;
        match tokio::time::timeout(self.timeout, self.fetch(client, url)).await {
            Ok(Ok(result)) => Ok(result),
            Ok(Err(e)) => Err(ToolError::Failed(failure(e))),
            Err(_) => Err(ToolError::Failed(format!(
                "timed out after {}s",
                self.timeout.as_secs_f64()
            ))),
        }
    }
}

/// What went wrong, without the URL: it may carry credentials in its user
/// info or query.
fn failure(error: reqwest::Error) -> String {
    let what = if error.is_timeout() {
        "timed out"
    } else if error.is_connect() {
        "could not connect"
    } else {
        "request failed"
    };
    format!("{what}: {}", error.without_url())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::time::Instant;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    fn context() -> ToolContext {
        ToolContext::new("/tmp/ws")
    }

    /// Serves `response` (a raw HTTP/1.1 response) to every connection on
    /// 127.0.0.1:0, after reading the request head; returns the base URL.
    async fn serve(response: Vec<u8>) -> String {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let response = response.clone();
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match conn.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    let _ = conn.write_all(&response).await;
                    let _ = conn.shutdown().await;
                });
            }
        });
        format!("http://{addr}")
    }

    fn response(status: &str, content_type: &str, body: &str) -> Vec<u8> {
        format!(
            "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    }

    #[tokio::test]
    async fn a_page_comes_back_with_status_type_and_body() {
        let base = serve(response("200 OK", "text/plain; charset=utf-8", "hello")).await;
        let out = HttpGet::new()
            .call(json!({"url": format!("{base}/page")}), &context())
            .await;
        assert_eq!(
            out,
            Ok(
                json!({"status": 200, "content_type": "text/plain; charset=utf-8",
                "body": "hello", "truncated": false})
            )
        );
    }

    #[tokio::test]
    async fn a_404_is_a_result_the_model_sees() {
        let base = serve(response("404 Not Found", "text/html", "<h1>gone</h1>")).await;
        let out = HttpGet::new()
            .call(json!({"url": base}), &context())
            .await
            .unwrap();
        assert_eq!(out["status"], 404);
        assert_eq!(out["body"], "<h1>gone</h1>");
    }

    #[tokio::test]
    async fn a_body_past_the_cap_is_truncated() {
        let base = serve(response("200 OK", "text/plain", &"x".repeat(100_000))).await;
        let out = HttpGet::with_limits(Duration::from_secs(10), 1000)
            .call(json!({"url": base}), &context())
            .await
            .unwrap();
        assert_eq!(out["truncated"], true);
        assert_eq!(out["body"].as_str().unwrap().len(), 1000);
        let base = serve(response("200 OK", "text/plain", &"x".repeat(1000))).await;
        let out = HttpGet::with_limits(Duration::from_secs(10), 1000)
            .call(json!({"url": base}), &context())
            .await
            .unwrap();
        assert_eq!(out["truncated"], false);
    }

    #[tokio::test]
    async fn other_schemes_are_refused() {
        for url in ["file:///etc/passwd", "ftp://example.com/x"] {
            let out = HttpGet::new().call(json!({"url": url}), &context()).await;
            assert!(matches!(out, Err(ToolError::Denied(_))), "{url}: {out:?}");
        }
        let out = HttpGet::new()
            .call(json!({"url": "not a url"}), &context())
            .await;
        assert!(matches!(out, Err(ToolError::Failed(_))), "{out:?}");
    }

    #[tokio::test]
    async fn a_silent_server_times_out_and_errors_hide_credentials() {
        // Bound but never accepting: the connection opens, no answer comes.
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let started = Instant::now();
        let out = HttpGet::with_limits(Duration::from_millis(200), 1000)
            .call(
                json!({"url": format!("http://user:hunter2@{addr}/")}),
                &context(),
            )
            .await;
        assert_eq!(out, Err(ToolError::Failed("timed out after 0.2s".into())));
        assert!(started.elapsed() < Duration::from_secs(3));
        drop(listener);
        let out = HttpGet::new()
            .call(
                json!({"url": format!("http://user:hunter2@{addr}/?key=hunter2")}),
                &context(),
            )
            .await;
        let Err(ToolError::Failed(message)) = out else {
            panic!("{out:?}")
        };
        assert!(!message.contains("hunter2"), "{message}");
    }

    #[tokio::test]
    async fn the_router_checks_the_input_first() {
        let router =
            application::tools::ToolRouter::new().with(std::sync::Arc::new(HttpGet::new()));
        let granted = vec!["http_get".to_owned()];
        for input in [
            json!({}),
            json!({"url": 3}),
            json!({"url": "http://x", "x": 1}),
        ] {
            let out = router.call("http_get", input, &granted, &context()).await;
            assert!(
                matches!(out, Err(ToolError::InvalidInput { .. })),
                "{out:?}"
            );
        }
    }
}
