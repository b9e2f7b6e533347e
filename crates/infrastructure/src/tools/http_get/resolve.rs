//! Name resolution for `http_get`, with the guard inside it.
//!
//! The addresses a name resolves to are checked where the client gets them
//! to connect, not in a lookup of their own beforehand: a name that answers
//! a public address to a check and 127.0.0.1 to the connection (DNS
//! rebinding) has no second answer to give. The base resolver is the
//! system's, or one a test injects to map a name of its own.

use std::net::SocketAddr;
use std::sync::Arc;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use super::guard::{HOW_TO_ALLOW, Reach};

/// The system's resolver (`getaddrinfo`, on a blocking thread), as reqwest
/// would use it.
#[derive(Debug, Default)]
pub(super) struct SystemResolver;

impl Resolve for SystemResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}

/// A name that resolves only to addresses the request may not reach.
#[derive(Debug, thiserror::Error)]
#[error("`{host}` resolves only to internal addresses ({why}); {HOW_TO_ALLOW}")]
pub(super) struct OnlyInternal {
    host: String,
    /// Each address and what it is.
    why: String,
}

/// Resolves through `base` and keeps only the addresses `reach` admits.
pub(super) struct Guarded {
    pub(super) base: Arc<dyn Resolve>,
    pub(super) reach: Reach,
}

impl Resolve for Guarded {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_owned();
        let reach = self.reach.clone();
        let resolving = self.base.resolve(name);
        Box::pin(async move {
            let addrs: Vec<SocketAddr> = resolving.await?.collect();
            let (kept, refused): (Vec<_>, Vec<_>) = addrs
                .into_iter()
                .map(|addr| (addr, reach.refuses(addr.ip())))
                .partition(|(_, why)| why.is_none());
            if kept.is_empty() && !refused.is_empty() {
                let why = refused
                    .iter()
                    .map(|(addr, why)| format!("{}: {}", addr.ip(), why.as_deref().unwrap_or("")))
                    .collect::<Vec<_>>()
                    .join("; ");
                return Err(Box::new(OnlyInternal { host, why }) as _);
            }
            Ok(Box::new(kept.into_iter().map(|(addr, _)| addr)) as Addrs)
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::str::FromStr;

    /// Answers every name with `addrs`.
    struct Fixed(Vec<SocketAddr>);

    impl Resolve for Fixed {
        fn resolve(&self, _: Name) -> Resolving {
            let addrs = self.0.clone();
            Box::pin(async move { Ok(Box::new(addrs.into_iter()) as Addrs) })
        }
    }

    fn guarded(addrs: &[&str], reach: Reach) -> Guarded {
        let addrs = addrs.iter().map(|a| a.parse().unwrap()).collect();
        Guarded {
            base: Arc::new(Fixed(addrs)),
            reach,
        }
    }

    async fn resolved(guard: &Guarded) -> Result<Vec<String>, String> {
        match guard.resolve(Name::from_str("mixed.test").unwrap()).await {
            Ok(addrs) => Ok(addrs.map(|a| a.to_string()).collect()),
            Err(e) => Err(e.to_string()),
        }
    }

    #[tokio::test]
    async fn internal_answers_are_dropped_and_none_left_is_an_error() {
        let public = Reach::PublicAnd(Vec::new());
        let mixed = guarded(&["127.0.0.1:0", "8.8.8.8:0", "[::1]:0"], public.clone());
        assert_eq!(resolved(&mixed).await, Ok(vec!["8.8.8.8:0".to_owned()]));
        let internal = guarded(&["127.0.0.1:0", "[::1]:0"], public);
        let err = resolved(&internal).await.unwrap_err();
        assert!(
            err.starts_with(
                "`mixed.test` resolves only to internal addresses (127.0.0.1: a loopback address; ::1: a loopback address)"
            ),
            "{err}"
        );
        let allowed = guarded(
            &["127.0.0.1:0", "[::1]:0"],
            Reach::PublicAnd(vec!["127.0.0.0/8".parse().unwrap()]),
        );
        assert_eq!(resolved(&allowed).await, Ok(vec!["127.0.0.1:0".to_owned()]));
        let anything = guarded(&["[::1]:0"], Reach::Anything);
        assert_eq!(resolved(&anything).await, Ok(vec!["[::1]:0".to_owned()]));
    }
}
