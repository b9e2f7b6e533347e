//! `http_get`: fetches a URL over HTTP(S) and returns its status and body.
//!
//! Never granted by default, and even when granted it does not reach inside:
//! loopback, private, link-local and other internal addresses are refused
//! unless the agent's grant allows them (`allow:`; see [`guard`]). The check
//! is on the address actually connected to: a URL's address literal before
//! the request, a name's addresses inside the resolver the client connects
//! through ([`resolve`]), and every redirect hop again, since the tool
//! follows redirects itself. Proxies are not used: through one, the address
//! connected to is the proxy's, and the check would judge the wrong host.
//!
//! Only `http` and `https` URLs are fetched (no `file:` or other schemes);
//! the body is read chunk by chunk and cut at a size cap so a large download
//! neither floods the model's context nor memory; and a non-2xx status is a
//! result, not a tool error, because the model should see the status.
//! Error messages never repeat the URL, which may carry credentials.

mod guard;
mod resolve;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use application::ports::{Tool, ToolContext, ToolError, ToolSpec};
use application::tools::lossy_text;
use async_trait::async_trait;
use domain::workflow::NetTarget;
use reqwest::dns::Resolve;
use reqwest::{Response, StatusCode, Url};
use serde_json::{Value, json};

use guard::{HOW_TO_ALLOW, Host, Reach};
use resolve::{Guarded, SystemResolver};

/// Default time for the whole fetch, redirects and body included.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// Default bytes of body kept; the rest is not downloaded.
const DEFAULT_MAX_BYTES: usize = 1024 * 1024;

/// Redirects followed before giving up (reqwest's own default).
const MAX_REDIRECTS: usize = 10;

/// Clients kept, one per [`Reach`]: grants come from workflow files, so a
/// long-lived server could meet any number of them; past this, a request
/// gets a client of its own that is not kept.
const MAX_CLIENTS: usize = 16;

/// Fetches a URL with GET.
pub struct HttpGet {
    /// A client per [`Reach`], built at the first request that needs it and
    /// kept so connections are pooled across calls. Per reach, because a
    /// pooled connection skips the resolver: only a request that would
    /// admit the same addresses may reuse it. A std mutex: held only to
    /// look up or insert, never across an await.
    clients: Mutex<HashMap<Reach, reqwest::Client>>,
    /// Turns names into addresses before the guard filters them.
    resolver: Arc<dyn Resolve>,
    timeout: Duration,
    max_bytes: usize,
}

impl std::fmt::Debug for HttpGet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpGet")
            .field("timeout", &self.timeout)
            .field("max_bytes", &self.max_bytes)
            .finish_non_exhaustive()
    }
}

impl HttpGet {
    /// A 30 s timeout and at most 1 MiB of body.
    pub fn new() -> Self {
        Self::with_limits(DEFAULT_TIMEOUT, DEFAULT_MAX_BYTES)
    }

    /// `timeout` bounds the whole fetch, redirects and body included; at
    /// most `max_bytes` of body are kept.
    pub fn with_limits(timeout: Duration, max_bytes: usize) -> Self {
        Self {
            clients: Mutex::new(HashMap::new()),
            resolver: Arc::new(SystemResolver),
            timeout,
            max_bytes,
        }
    }

    /// Resolves names through `resolver` instead of the system's; what it
    /// answers is checked like any answer. For tests and for embedders with
    /// a resolver of their own.
    #[must_use]
    pub fn with_resolver(mut self, resolver: Arc<dyn Resolve>) -> Self {
        self.resolver = resolver;
        self.clients = Mutex::new(HashMap::new());
        self
    }

    /// The client for requests that may reach `reach`.
    fn client(&self, reach: &Reach) -> Result<reqwest::Client, ToolError> {
        if let Some(client) = self.kept().get(reach) {
            return Ok(client.clone());
        }
        // reqwest is built without a default crypto provider (ring is
        // lighter to build than aws-lc); an earlier install is fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let guarded = Guarded {
            base: Arc::clone(&self.resolver),
            reach: reach.clone(),
        };
        let client = reqwest::Client::builder()
            .user_agent(concat!("awr/", env!("CARGO_PKG_VERSION")))
            .dns_resolver(guarded)
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| {
                ToolError::Failed(format!("cannot build the HTTP client: {}", e.without_url()))
            })?;
        let mut kept = self.kept();
        if kept.len() < MAX_CLIENTS {
            kept.insert(reach.clone(), client.clone());
        }
        Ok(client)
    }

    /// The kept clients; a poisoned lock only means a panic elsewhere
    /// mid-insert, which leaves the map whole.
    fn kept(&self) -> std::sync::MutexGuard<'_, HashMap<Reach, reqwest::Client>> {
        self.clients
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Follows redirects from `url`, each hop checked, and reads the last
    /// response.
    async fn fetch(&self, mut url: Url, allow: &[NetTarget]) -> Result<Value, ToolError> {
        for _ in 0..=MAX_REDIRECTS {
            let reach = reach(&url, allow)?;
            let response = self
                .client(&reach)?
                .get(url.clone())
                .send()
                .await
                .map_err(failure)?;
            match next_hop(&url, &response) {
                Some(next) => url = next,
                None => return self.read(response).await.map_err(failure),
            }
        }
        Err(ToolError::Failed(format!(
            "too many redirects (more than {MAX_REDIRECTS})"
        )))
    }

    /// The status and at most `max_bytes` of the body.
    async fn read(&self, mut response: Response) -> Result<Value, reqwest::Error> {
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
                          content type and body as text (truncated past a size limit). \
                          Internal addresses (this machine, private networks) are refused \
                          unless the workflow allows them."
                .into(),
            input_schema: json!({"type": "object", "required": ["url"], "additionalProperties": false,
                "properties": {"url": {"type": "string", "description": "Absolute http:// or https:// URL"}}}),
        }
    }

    async fn call(&self, input: Value, context: &ToolContext) -> Result<Value, ToolError> {
        let url = input["url"].as_str().unwrap_or_default();
        let url = reqwest::Url::parse(url)
            .map_err(|e| ToolError::Failed(format!("not a valid URL: {e}")))?;
        let allow = context
            .grant
            .as_ref()
            .map_or(&[][..], |grant| grant.allow.as_slice());
        match tokio::time::timeout(self.timeout, self.fetch(url, allow)).await {
            Ok(result) => result,
            Err(_) => Err(ToolError::Failed(format!(
                "timed out after {}s",
                self.timeout.as_secs_f64()
            ))),
        }
    }
}

/// What a request to `url` may reach, or why it is refused before it is
/// sent: a scheme other than http(s), or an address literal the grant does
/// not admit (no resolver sees those).
fn reach(url: &Url, allow: &[NetTarget]) -> Result<Reach, ToolError> {
    if !matches!(url.scheme(), "http" | "https") {
        return Err(ToolError::Denied(format!(
            "`{}:` URLs are not fetched; only http and https",
            url.scheme()
        )));
    }
    let (Some(host), Some(port)) = (url.host_str(), url.port_or_known_default()) else {
        return Err(ToolError::Failed("the URL names no host".into()));
    };
    let host = Host::of(host);
    let reach = Reach::of(allow, host, port);
    if let Host::Ip(ip) = host
        && let Some(why) = reach.refuses(ip)
    {
        return Err(ToolError::Denied(format!("{ip} is {why}; {HOW_TO_ALLOW}")));
    }
    Ok(reach)
}

/// Where a redirect leads, if `response` is one that can be followed (a
/// GET stays a GET on every redirect status); a redirect without a usable
/// `Location` is the result itself, as reqwest would return it.
fn next_hop(url: &Url, response: &Response) -> Option<Url> {
    let redirects = [
        StatusCode::MOVED_PERMANENTLY,
        StatusCode::FOUND,
        StatusCode::SEE_OTHER,
        StatusCode::TEMPORARY_REDIRECT,
        StatusCode::PERMANENT_REDIRECT,
    ];
    if !redirects.contains(&response.status()) {
        return None;
    }
    let location = response.headers().get(reqwest::header::LOCATION)?;
    url.join(location.to_str().ok()?).ok()
}

/// What went wrong, without the URL: it may carry credentials in its user
/// info or query. A name refused by the resolver is a refusal, not a failure.
fn failure(error: reqwest::Error) -> ToolError {
    let mut source = std::error::Error::source(&error);
    while let Some(cause) = source {
        if let Some(refused) = cause.downcast_ref::<resolve::OnlyInternal>() {
            return ToolError::Denied(refused.to_string());
        }
        source = cause.source();
    }
    let what = if error.is_timeout() {
        "timed out"
    } else if error.is_connect() {
        "could not connect"
    } else {
        "request failed"
    };
    ToolError::Failed(format!("{what}: {}", error.without_url()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::net::SocketAddr;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Instant;

    use application::tools::ToolRouter;
    use domain::workflow::ToolGrant;
    use reqwest::dns::{Addrs, Name, Resolving};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// A call made outside any grant's settings: public addresses only.
    fn context() -> ToolContext {
        ToolContext::new("/tmp/ws")
    }

    /// A call under a grant of `http_get` that allows `targets`.
    fn allowing(targets: &[&str]) -> ToolContext {
        let allow = targets.iter().map(|t| t.parse().unwrap());
        context().granting(ToolGrant::new("http_get").allowing(allow))
    }

    /// A server on 127.0.0.1:0 that counts the connections it accepts.
    struct Server {
        addr: SocketAddr,
        connections: Arc<AtomicUsize>,
    }

    impl Server {
        fn url(&self) -> String {
            format!("http://{}/", self.addr)
        }

        fn port(&self) -> u16 {
            self.addr.port()
        }

        fn connections(&self) -> usize {
            self.connections.load(Ordering::SeqCst)
        }
    }

    /// Serves `response` (a raw HTTP/1.1 response) to every connection,
    /// after reading the request head.
    async fn serve(response: Vec<u8>) -> Server {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&connections);
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
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
        Server { addr, connections }
    }

    fn response(status: &str, content_type: &str, body: &str) -> Vec<u8> {
        format!(
            "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    }

    fn redirect(location: &str) -> Vec<u8> {
        format!(
            "HTTP/1.1 302 Found\r\nLocation: {location}\r\nContent-Length: 0\r\n\
             Connection: close\r\n\r\n"
        )
        .into_bytes()
    }

    /// Answers `rebind.test` with 127.0.0.1, as a name an attacker points
    /// inside would; any other name is unknown.
    struct TestNames;

    impl Resolve for TestNames {
        fn resolve(&self, name: Name) -> Resolving {
            let found = name.as_str() == "rebind.test";
            Box::pin(async move {
                if !found {
                    return Err("no such name".into());
                }
                let addr: SocketAddr = ([127, 0, 0, 1], 0).into();
                Ok(Box::new(std::iter::once(addr)) as Addrs)
            })
        }
    }

    fn denied(out: Result<Value, ToolError>) -> String {
        match out {
            Err(ToolError::Denied(message)) => message,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_page_comes_back_with_status_type_and_body() {
        let server = serve(response("200 OK", "text/plain; charset=utf-8", "hello")).await;
        let out = HttpGet::new()
            .call(
                json!({"url": format!("{}page", server.url())}),
                &allowing(&["127.0.0.1"]),
            )
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
        let server = serve(response("404 Not Found", "text/html", "<h1>gone</h1>")).await;
        let out = HttpGet::new()
            .call(json!({"url": server.url()}), &allowing(&["127.0.0.1"]))
            .await
            .unwrap();
        assert_eq!(out["status"], 404);
        assert_eq!(out["body"], "<h1>gone</h1>");
    }

    #[tokio::test]
    async fn a_body_past_the_cap_is_truncated() {
        let local = allowing(&["127.0.0.1"]);
        let server = serve(response("200 OK", "text/plain", &"x".repeat(100_000))).await;
        let out = HttpGet::with_limits(Duration::from_secs(10), 1000)
            .call(json!({"url": server.url()}), &local)
            .await
            .unwrap();
        assert_eq!(out["truncated"], true);
        assert_eq!(out["body"].as_str().unwrap().len(), 1000);
        let server = serve(response("200 OK", "text/plain", &"x".repeat(1000))).await;
        let out = HttpGet::with_limits(Duration::from_secs(10), 1000)
            .call(json!({"url": server.url()}), &local)
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
        let local = allowing(&["127.0.0.1"]);
        let started = Instant::now();
        let out = HttpGet::with_limits(Duration::from_millis(200), 1000)
            .call(
                json!({"url": format!("http://user:hunter2@{addr}/")}),
                &local,
            )
            .await;
        assert_eq!(out, Err(ToolError::Failed("timed out after 0.2s".into())));
        assert!(started.elapsed() < Duration::from_secs(3));
        drop(listener);
        let url = format!("http://user:hunter2@{addr}/?key=hunter2");
        for context in [local, context()] {
            let out = HttpGet::new()
                .call(json!({"url": url.clone()}), &context)
                .await;
            let (Err(ToolError::Failed(message)) | Err(ToolError::Denied(message))) = out else {
                panic!("{out:?}")
            };
            assert!(!message.contains("hunter2"), "{message}");
        }
    }

    #[tokio::test]
    async fn the_router_checks_the_input_first() {
        let router = ToolRouter::new().with(Arc::new(HttpGet::new()));
        let granted = [ToolGrant::new("http_get")];
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

    #[tokio::test]
    async fn loopback_is_refused_unless_the_grant_allows_it() {
        let server = serve(response("200 OK", "text/plain", "inside")).await;
        let router = ToolRouter::new().with(Arc::new(HttpGet::new()));
        let input = json!({"url": server.url()});
        let plain = [ToolGrant::new("http_get")];
        let message = denied(
            router
                .call("http_get", input.clone(), &plain, &context())
                .await,
        );
        assert!(
            message.starts_with("127.0.0.1 is a loopback address; http_get reaches internal addresses only where the agent's grant allows them"),
            "{message}"
        );
        assert_eq!(server.connections(), 0);
        // The same fetch, under a grant that allows the server.
        for target in [format!("127.0.0.1:{}", server.port()), "127.0.0.0/8".into()] {
            let granted = [ToolGrant::new("http_get").allowing([target.parse().unwrap()])];
            let out = router
                .call("http_get", input.clone(), &granted, &context())
                .await
                .unwrap();
            assert_eq!(out["body"], "inside", "{target}");
        }
        // Another port of the same address is not allowed by host:port.
        let other = [ToolGrant::new("http_get").allowing(["127.0.0.1:1".parse().unwrap()])];
        denied(router.call("http_get", input, &other, &context()).await);
        assert_eq!(server.connections(), 2);
    }

    #[tokio::test]
    async fn a_redirect_inside_is_refused_and_never_reaches_its_target() {
        let inside = serve(response("200 OK", "text/plain", "secret")).await;
        for location in [
            inside.url(),
            format!("http://localhost:{}/", inside.port()),
            format!("http://[::ffff:127.0.0.1]:{}/", inside.port()),
        ] {
            let allowed = serve(redirect(&location)).await;
            let context = allowing(&[&allowed.addr.to_string()]);
            let message = denied(
                HttpGet::new()
                    .call(json!({"url": allowed.url()}), &context)
                    .await,
            );
            assert!(message.contains("loopback"), "{location}: {message}");
            assert_eq!(allowed.connections(), 1, "{location}");
            assert_eq!(inside.connections(), 0, "{location}");
        }
        // Allowed at both ends, the redirect is followed.
        let allowed = serve(redirect(&inside.url())).await;
        let both = allowing(&[&allowed.addr.to_string(), &inside.addr.to_string()]);
        let out = HttpGet::new()
            .call(json!({"url": allowed.url()}), &both)
            .await
            .unwrap();
        assert_eq!(out["body"], "secret");
        assert_eq!(inside.connections(), 1);
    }

    #[tokio::test]
    async fn names_that_resolve_inside_are_refused() {
        let server = serve(response("200 OK", "text/plain", "inside")).await;
        let port = server.port();
        let message = denied(
            HttpGet::new()
                .call(
                    json!({"url": format!("http://localhost:{port}/")}),
                    &context(),
                )
                .await,
        );
        assert!(
            message.starts_with(
                "`localhost` resolves only to internal addresses (127.0.0.1: a loopback address"
            ),
            "{message}"
        );
        let names = || HttpGet::new().with_resolver(Arc::new(TestNames));
        let url = json!({"url": format!("http://rebind.test:{port}/")});
        let message = denied(names().call(url.clone(), &context()).await);
        assert!(
            message.starts_with(
                "`rebind.test` resolves only to internal addresses (127.0.0.1: a loopback address)"
            ),
            "{message}"
        );
        // A name allowed on another port is judged by its addresses.
        denied(
            names()
                .call(url.clone(), &allowing(&["rebind.test:1"]))
                .await,
        );
        assert_eq!(server.connections(), 0);
        for allow in ["rebind.test", &format!("REBIND.test:{port}"), "127.0.0.0/8"] {
            let out = names().call(url.clone(), &allowing(&[allow])).await;
            assert_eq!(out.unwrap()["body"], "inside", "{allow}");
        }
        let out = HttpGet::new()
            .call(
                json!({"url": format!("http://localhost:{port}/")}),
                &allowing(&["localhost"]),
            )
            .await;
        assert_eq!(out.unwrap()["body"], "inside");
    }

    #[tokio::test]
    async fn internal_address_literals_are_refused_before_any_connection() {
        let server = serve(response("200 OK", "text/plain", "inside")).await;
        let port = server.port();
        let cases = [
            (
                format!("http://[::ffff:127.0.0.1]:{port}/"),
                "::ffff:127.0.0.1 is the IPv4-mapped form of 127.0.0.1, a loopback address; ",
            ),
            (
                "http://169.254.169.254/latest/meta-data/".to_owned(),
                "169.254.169.254 is a link-local address; ",
            ),
            (
                format!("http://2130706433:{port}/"),
                "127.0.0.1 is a loopback address; ",
            ),
            (
                format!("http://0.0.0.0:{port}/"),
                "0.0.0.0 is an unspecified address; ",
            ),
            (
                format!("http://[::1]:{port}/"),
                "::1 is a loopback address; ",
            ),
            (
                "https://[fd00:ec2::254]/".to_owned(),
                "fd00:ec2::254 is a unique-local address; ",
            ),
        ];
        for (url, expected) in cases {
            let started = Instant::now();
            let message = denied(HttpGet::new().call(json!({"url": url}), &context()).await);
            assert!(message.starts_with(expected), "{url}: {message}");
            assert!(
                started.elapsed() < Duration::from_millis(500),
                "{url}: {:?}",
                started.elapsed()
            );
        }
        assert_eq!(server.connections(), 0);
    }
}
