//! What no web page may do to `awr serve`, checked on every request before
//! anything else (docs/security.md):
//!
//! - **Host** (DNS rebinding): a page on a name that an attacker points at
//!   127.0.0.1 reaches the server as same-origin, and its requests carry
//!   that name. Only `localhost` (and `*.localhost`), loopback addresses,
//!   the bound address (any address when bound to all of them: an address
//!   cannot be rebound) and `--allow-host` names are served; others get 421.
//! - **Origin** (cross-site requests): a request that carries an `Origin`
//!   must come from the server's own origin or an `--allow-origin` one;
//!   `null` (a sandboxed frame, a file) or any other gets 403. One without
//!   `Origin` that a browser marks as sent from another site
//!   (`Sec-Fetch-Site`) gets 403 too, unless it is a plain navigation.
//! - **JSON bodies**: a request with a body must say
//!   `Content-Type: application/json`, else 415. A browser cannot send that
//!   across origins without a preflight, which the Origin check refuses.

use std::net::{IpAddr, SocketAddr};

use anyhow::{anyhow, bail};
use axum::body::HttpBody;
use axum::extract::{Request, State};
use axum::http::uri::Authority;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::{ApiError, App};

/// What the checks let in beyond the server's own names and origin.
#[derive(Debug, Clone, Default)]
pub struct Guard {
    /// `--allow-host`: more names the server answers to (lowercase).
    pub hosts: Vec<String>,
    /// `--allow-origin`: more origins that may call it, each
    /// `scheme://host[:port]` as [`parse_origin`] makes it.
    pub origins: Vec<String>,
    /// The address the server listens on.
    pub bound: Option<SocketAddr>,
    /// Whether it serves HTTPS: its own origin's scheme.
    pub tls: bool,
}

impl Guard {
    /// Whether `host` (a Host header's name, without its port) is one the
    /// server answers to.
    fn serves(&self, host: &str) -> bool {
        let host = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
        if host == "localhost" || host.ends_with(".localhost") {
            return true;
        }
        let literal = host.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = literal.parse::<IpAddr>() {
            return ip.is_loopback()
                || self
                    .bound
                    .is_some_and(|b| b.ip() == ip || b.ip().is_unspecified());
        }
        self.hosts.contains(&host)
    }

    /// The server's own origin as a request reached it (`authority`).
    fn own_origin(&self, authority: &Authority) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        normal_origin(scheme, authority)
    }
}

/// `--allow-host NAME`: a host name (no scheme, port or path).
pub fn parse_host(text: &str) -> anyhow::Result<String> {
    let name = text.trim().to_ascii_lowercase();
    let valid = !name.is_empty()
        && name.len() <= 253
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-'));
    if !valid {
        bail!(
            "--allow-host `{text}`: give a host name, such as awr.example.com (no scheme, port or path)"
        );
    }
    Ok(name)
}

/// `--allow-origin ORIGIN`: `http(s)://host[:port]`, as a browser sends it
/// (lowercase, no default port, no path).
pub fn parse_origin(text: &str) -> anyhow::Result<String> {
    let bad = |why: &str| {
        anyhow!("--allow-origin `{text}`: {why}; give e.g. https://ui.example.com:8443")
    };
    let uri: Uri = text.trim().parse().map_err(|_| bad("not a URL"))?;
    let scheme = match uri.scheme_str() {
        Some("http") => "http",
        Some("https") => "https",
        _ => return Err(bad("the scheme must be http or https")),
    };
    if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
        return Err(bad("an origin has no path or query"));
    }
    let authority = uri.authority().ok_or_else(|| bad("no host"))?;
    if authority.as_str().contains('@') {
        return Err(bad("an origin has no user name"));
    }
    Ok(normal_origin(scheme, authority))
}

/// `scheme://host[:port]`, lowercase, without the scheme's default port.
fn normal_origin(scheme: &str, authority: &Authority) -> String {
    let host = authority.host().to_ascii_lowercase();
    let default = if scheme == "https" { 443 } else { 80 };
    match authority.port_u16() {
        Some(port) if port != default => format!("{scheme}://{host}:{port}"),
        _ => format!("{scheme}://{host}"),
    }
}

/// The authority the request was sent to: its URI's (an absolute-form
/// request line), else its `Host`. `None` for none, for one with a user
/// name (`evil@127.0.0.1`), or for a URI and a `Host` that disagree: what
/// a browser never sends, and a proxy between could read otherwise.
fn authority(request: &Request) -> Option<Authority> {
    let host = match request.headers().get(header::HOST) {
        Some(host) => Some(host.to_str().ok()?.parse::<Authority>().ok()?),
        None => None,
    };
    let authority = match (request.uri().authority(), host) {
        (Some(uri), Some(host)) if *uri != host => return None,
        (Some(uri), _) => uri.clone(),
        (None, Some(host)) => host,
        (None, None) => return None,
    };
    (!authority.as_str().contains('@')).then_some(authority)
}

/// Whether `Sec-Fetch-Site` says another site sent it.
fn from_another_site(headers: &HeaderMap) -> bool {
    headers
        .get("sec-fetch-site")
        .is_some_and(|v| matches!(v.as_bytes(), b"cross-site" | b"same-site"))
}

/// Whether the request is a browser's plain navigation (a link followed, an
/// address typed): nothing a page can read the answer of.
fn navigation(request: &Request) -> bool {
    matches!(*request.method(), Method::GET | Method::HEAD)
        && request
            .headers()
            .get("sec-fetch-mode")
            .is_some_and(|v| v.as_bytes() == b"navigate")
}

/// Whether the request has a body: any bytes to come, whatever its method
/// and however they are framed (a length, chunks, HTTP/2 data frames).
fn has_body(request: &Request) -> bool {
    !request.body().is_end_stream()
}

/// Whether the body is said to be JSON (`application/json`, parameters
/// such as `charset` allowed).
fn says_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"))
}

/// The checks of the module docs, in their order.
pub async fn check(State(app): State<App>, request: Request, next: Next) -> Response {
    match judge(&app.config().guard, &request) {
        Ok(()) => next.run(request).await,
        Err(refusal) => {
            tracing::info!(
                method = %request.method(),
                path = request.uri().path(),
                status = refusal.status().as_u16(),
                why = refusal.message(),
                "refused"
            );
            refusal.into_response()
        }
    }
}

fn judge(guard: &Guard, request: &Request) -> Result<(), ApiError> {
    let Some(authority) = authority(request) else {
        return Err(ApiError::bad_request(
            "the request names no host, or names it twice over (one Host header, no user name, the same as an absolute request line's)",
        ));
    };
    if !guard.serves(authority.host()) {
        return Err(ApiError::new(
            StatusCode::MISDIRECTED_REQUEST,
            format!(
                "this server does not answer to the host `{}`; start it with --allow-host {} if it should",
                authority.host().escape_debug(),
                authority.host().escape_debug()
            ),
        ));
    }
    let headers = request.headers();
    match headers.get(header::ORIGIN) {
        Some(origin) => {
            let origin = origin.to_str().unwrap_or("?");
            let own = guard.own_origin(&authority);
            let allowed = match parse_origin(origin) {
                Ok(origin) => origin == own || guard.origins.contains(&origin),
                Err(_) => false,
            };
            if !allowed {
                return Err(ApiError::new(
                    StatusCode::FORBIDDEN,
                    format!(
                        "requests from the origin `{}` are refused: only {own} may call this server (more with --allow-origin; behind a TLS proxy, --allow-origin https://HOST)",
                        origin.escape_debug()
                    ),
                ));
            }
        }
        None if from_another_site(headers) && !navigation(request) => {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "a request another site sent is refused",
            ));
        }
        None => {}
    }
    if request.method() != Method::OPTIONS && has_body(request) && !says_json(headers) {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "a request body must be JSON, sent with `Content-Type: application/json`",
        ));
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use axum::body::Body;

    fn guard() -> Guard {
        Guard {
            hosts: vec!["awr.example.com".into()],
            origins: vec![parse_origin("https://ui.example.com").unwrap()],
            bound: Some("127.0.0.1:8080".parse().unwrap()),
            tls: false,
        }
    }

    fn get(host: &str) -> axum::http::request::Builder {
        Request::get("/workflows").header("host", host)
    }

    fn status(guard: &Guard, request: axum::http::request::Builder) -> Option<u16> {
        judge(guard, &request.body(Body::empty()).unwrap())
            .err()
            .map(|e| e.status().as_u16())
    }

    #[test]
    fn only_the_servers_own_names_are_served() {
        let g = guard();
        for host in [
            "127.0.0.1:8080",
            "127.0.0.2",
            "localhost:8080",
            "LOCALHOST",
            "ui.localhost:8080",
            "[::1]:8080",
            "awr.example.com",
            "AWR.example.com.:8080",
        ] {
            assert_eq!(status(&g, get(host)), None, "{host}");
        }
        for host in [
            "attacker.example:8080",
            "localhost.attacker.example",
            "10.0.0.7:8080",
            "[fe80::1]",
            "example.com",
        ] {
            assert_eq!(status(&g, get(host)), Some(421), "{host}");
        }
        assert_eq!(status(&g, Request::get("/workflows")), Some(400), "no Host");
        // Bound to every address, an address literal is served (it cannot
        // be rebound), a name is not.
        let all = Guard {
            bound: Some("0.0.0.0:8080".parse().unwrap()),
            ..Guard::default()
        };
        assert_eq!(status(&all, get("10.0.0.7:8080")), None);
        assert_eq!(status(&all, get("attacker.example")), Some(421));
    }

    #[test]
    fn only_the_servers_own_origin_and_the_allowed_ones_may_call() {
        let g = guard();
        let from = |origin: &str| get("127.0.0.1:8080").header("origin", origin);
        assert_eq!(status(&g, from("http://127.0.0.1:8080")), None);
        assert_eq!(status(&g, from("https://ui.example.com")), None);
        assert_eq!(status(&g, from("https://UI.example.com:443")), None);
        for origin in [
            "http://evil.example",
            "null",
            "http://127.0.0.1:9999",
            "https://127.0.0.1:8080",
            "http://localhost:8080",
            "http://ui.example.com",
            "not a url",
        ] {
            assert_eq!(status(&g, from(origin)), Some(403), "{origin}");
        }
        let tls = Guard {
            tls: true,
            ..guard()
        };
        assert_eq!(status(&tls, from("https://127.0.0.1:8080")), None);
        assert_eq!(status(&tls, from("http://127.0.0.1:8080")), Some(403));
    }

    #[test]
    fn what_another_site_sends_without_an_origin_is_refused_but_a_navigation() {
        let g = guard();
        let cross = get("127.0.0.1:8080").header("sec-fetch-site", "cross-site");
        assert_eq!(status(&g, cross), Some(403));
        let same_site = get("127.0.0.1:8080").header("sec-fetch-site", "same-site");
        assert_eq!(status(&g, same_site), Some(403));
        let link = get("127.0.0.1:8080")
            .header("sec-fetch-site", "cross-site")
            .header("sec-fetch-mode", "navigate");
        assert_eq!(status(&g, link), None);
        let own = get("127.0.0.1:8080").header("sec-fetch-site", "same-origin");
        assert_eq!(status(&g, own), None);
    }

    #[test]
    fn a_body_must_say_it_is_json() {
        let g = guard();
        let post = |ct: Option<&str>| {
            let b = Request::post("/workflows").header("host", "127.0.0.1:8080");
            match ct {
                Some(ct) => b.header("content-type", ct),
                None => b,
            }
        };
        let with_body = |builder: axum::http::request::Builder| {
            judge(&g, &builder.body(Body::from("{}")).unwrap())
                .err()
                .map(|e| e.status().as_u16())
        };
        assert_eq!(with_body(post(Some("application/json"))), None);
        assert_eq!(
            with_body(post(Some("Application/JSON; charset=utf-8"))),
            None
        );
        for ct in [
            Some("text/plain"),
            Some("application/x-www-form-urlencoded"),
            Some("multipart/form-data; boundary=x"),
            Some("application/jsonx"),
            None,
        ] {
            assert_eq!(with_body(post(ct)), Some(415), "{ct:?}");
        }
        let get_with_body = get("127.0.0.1:8080").header("content-type", "text/plain");
        assert_eq!(with_body(get_with_body), Some(415));
        // No body: nothing to say of it (the route answers, 405 or 400).
        assert_eq!(status(&g, post(None)), None);
        assert_eq!(status(&g, get("127.0.0.1:8080")), None);
    }

    #[test]
    fn flags_are_checked_when_given() {
        assert_eq!(parse_host("AWR.Example.com").unwrap(), "awr.example.com");
        for bad in ["", "http://x", "x:80", "x/y", "a b"] {
            assert!(parse_host(bad).is_err(), "{bad}");
        }
        assert_eq!(
            parse_origin("HTTPS://UI.example.com:443/").unwrap(),
            "https://ui.example.com"
        );
        assert_eq!(
            parse_origin("http://localhost:3000").unwrap(),
            "http://localhost:3000"
        );
        for bad in [
            "ui.example.com",
            "ftp://x",
            "https://x/path",
            "https://u@x",
            "null",
        ] {
            assert!(parse_origin(bad).is_err(), "{bad}");
        }
    }
}
