//! Which addresses `http_get` may connect to: public internet addresses,
//! and what the agent's grant allows (`allow:`).
//!
//! A prompt-injected agent must not reach this machine's own services (`awr
//! serve` on 127.0.0.1), the cloud's metadata service (169.254.169.254, whose
//! answers include credentials) or the private network it sits in. So
//! every address that is not a public unicast host is refused unless a
//! grant admits it, and an IPv6 address that carries an IPv4 address (so
//! that the packet ends up there) is judged by the IPv4 address it carries.
//! The verdict is for one request ([`Reach`]): the URL's host and port decide
//! which `allow:` entries apply, the address actually connected to decides
//! the rest.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use domain::workflow::NetTarget;
use ipnet::{IpNet, Ipv4Net, Ipv6Net};

/// IPv4 ranges that hold no public internet host, by what they are.
///
/// Beyond loopback, private and link-local: all of 0.0.0.0/8, because
/// Linux connects 0.0.0.0 to this machine; 100.64.0.0/10 (carrier-grade
/// NAT), private in all but name, where some clouds run their metadata
/// service (100.100.100.200); 192.0.0.0/24, protocol assignments, once
/// home to a metadata address (192.0.0.192); 198.18.0.0/15, a benchmarking
/// range some local proxies use for their own addresses; 240.0.0.0/4
/// (reserved, and the broadcast address) and multicast, which are no host.
/// The documentation ranges (192.0.2.0/24, ...) route nowhere, so they are
/// left alone: refusing them would protect nothing.
const INTERNAL_V4: &[(Ipv4Net, &str)] = &[
    (v4([0, 0, 0, 0], 32), "an unspecified address"),
    (v4([0, 0, 0, 0], 8), "a \"this network\" address"),
    (v4([10, 0, 0, 0], 8), "a private address"),
    (
        v4([100, 64, 0, 0], 10),
        "a shared (carrier-grade NAT) address",
    ),
    (v4([127, 0, 0, 0], 8), "a loopback address"),
    (v4([169, 254, 0, 0], 16), "a link-local address"),
    (v4([172, 16, 0, 0], 12), "a private address"),
    (v4([192, 0, 0, 0], 24), "an IETF protocol address"),
    (v4([192, 168, 0, 0], 16), "a private address"),
    (v4([198, 18, 0, 0], 15), "a benchmarking address"),
    (v4([224, 0, 0, 0], 4), "a multicast address"),
    (v4([255, 255, 255, 255], 32), "the broadcast address"),
    (v4([240, 0, 0, 0], 4), "a reserved address"),
];

/// IPv6 ranges that hold no public internet host. Besides the ones named in
/// every list, site-local fec0::/10 (deprecated, still routed locally by
/// some stacks) and local-use NAT64 64:ff9b:1::/48, which translates to
/// whatever IPv4 network its operator chose.
const INTERNAL_V6: &[(Ipv6Net, &str)] = &[
    (v6([0, 0, 0, 0, 0, 0, 0, 0], 128), "an unspecified address"),
    (v6([0, 0, 0, 0, 0, 0, 0, 1], 128), "a loopback address"),
    (
        v6([0x64, 0xff9b, 1, 0, 0, 0, 0, 0], 48),
        "a local-use NAT64 address",
    ),
    (
        v6([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7),
        "a unique-local address",
    ),
    (
        v6([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10),
        "a link-local address",
    ),
    (
        v6([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10),
        "a site-local address",
    ),
    (v6([0xff00, 0, 0, 0, 0, 0, 0, 0], 8), "a multicast address"),
];

const fn v4(o: [u8; 4], len: u8) -> Ipv4Net {
    Ipv4Net::new_assert(Ipv4Addr::new(o[0], o[1], o[2], o[3]), len)
}

const fn v6(s: [u16; 8], len: u8) -> Ipv6Net {
    Ipv6Net::new_assert(
        Ipv6Addr::new(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]),
        len,
    )
}

/// Why `ip` is no public internet address ("a loopback address"), or
/// `None` when it is one.
pub(super) fn internal(ip: IpAddr) -> Option<String> {
    match ip {
        IpAddr::V4(v4) => internal_v4(v4).map(str::to_owned),
        IpAddr::V6(v6) => {
            if let Some((_, what)) = INTERNAL_V6.iter().find(|(net, _)| net.contains(&v6)) {
                return Some((*what).to_owned());
            }
            let (form, carried) = carried_v4(v6)?;
            let what = internal_v4(carried)?;
            Some(format!("{form} of {carried}, {what}"))
        }
    }
}

fn internal_v4(ip: Ipv4Addr) -> Option<&'static str> {
    INTERNAL_V4
        .iter()
        .find(|(net, _)| net.contains(&ip))
        .map(|(_, what)| *what)
}

/// The IPv4 address an IPv6 address carries, where the packet goes, and
/// the form that carries it.
fn carried_v4(ip: Ipv6Addr) -> Option<(&'static str, Ipv4Addr)> {
    let s = ip.segments();
    let low = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    match s {
        // ::ffff:a.b.c.d: a dual-stack socket connects to a.b.c.d itself.
        [0, 0, 0, 0, 0, 0xffff, _, _] => Some(("the IPv4-mapped form", low)),
        // ::ffff:0:a.b.c.d (SIIT, RFC 2765).
        [0, 0, 0, 0, 0xffff, 0, _, _] => Some(("the IPv4-translated form", low)),
        // ::a.b.c.d (deprecated, RFC 4291 §2.5.5.1).
        [0, 0, 0, 0, 0, 0, _, _] => Some(("the IPv4-compatible form", low)),
        // 64:ff9b::a.b.c.d: a NAT64 gateway connects to a.b.c.d.
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => Some(("the NAT64 form", low)),
        // 2002:AABB:CCDD::/48: a 6to4 relay sends to AA.BB.CC.DD.
        [0x2002, hi, lo, ..] => Some((
            "the 6to4 form",
            Ipv4Addr::new((hi >> 8) as u8, hi as u8, (lo >> 8) as u8, lo as u8),
        )),
        // 2001:0::/32 Teredo: the client's address, inverted, in the last 32 bits.
        [0x2001, 0, ..] => Some(("the Teredo form", !low)),
        _ => None,
    }
}

/// What one request may connect to, given the agent's grant and the URL's
/// host and port. The same value means the same verdict on every address,
/// so the tool keeps one client per value.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum Reach {
    /// Any address: the URL's host is a name the grant allows, and
    /// whatever it resolves to is what the user asked for.
    Anything,
    /// Public addresses, and these ranges (each `allow:` address or range
    /// that applies on the URL's port), sorted.
    PublicAnd(Vec<IpNet>),
}

/// The host of a URL: a name to resolve, or an address written in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Host<'a> {
    /// A DNS name, resolved through the guarded resolver.
    Name(&'a str),
    /// An address literal, which no resolver sees: checked before the request.
    Ip(IpAddr),
}

impl<'a> Host<'a> {
    /// `host` as a URL gives it (`[::1]` bracketed; other IPv4 notations
    /// already turned into dotted decimal by the URL parser).
    pub(super) fn of(host: &'a str) -> Self {
        let bare = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        match bare.parse() {
            Ok(ip) => Host::Ip(ip),
            Err(_) => Host::Name(host),
        }
    }
}

impl Reach {
    /// What a request to `host`, port `port`, may reach under `allow`.
    pub(super) fn of(allow: &[NetTarget], host: Host<'_>, port: u16) -> Self {
        if let Host::Name(name) = host
            && allow.iter().any(|t| t.names_host(name, port))
        {
            return Reach::Anything;
        }
        let mut ranges: Vec<IpNet> = allow.iter().filter_map(|t| t.range_on(port)).collect();
        ranges.sort_unstable();
        ranges.dedup();
        Reach::PublicAnd(ranges)
    }

    /// Why a connection to `ip` is refused, or `None` when it may be made.
    pub(super) fn refuses(&self, ip: IpAddr) -> Option<String> {
        let Reach::PublicAnd(ranges) = self else {
            return None;
        };
        let why = internal(ip)?;
        let canonical = ip.to_canonical();
        let allowed = ranges
            .iter()
            .any(|net| net.contains(&ip) || net.contains(&canonical));
        (!allowed).then_some(why)
    }
}

/// Said after every refusal: how to allow what was refused.
pub(super) const HOW_TO_ALLOW: &str = "http_get reaches internal addresses only where the agent's grant allows them (`tools: [{name: http_get, allow: [HOST, HOST:PORT, IP or CIDR]}]`)";

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn internal_addresses_are_named_and_public_ones_pass() {
        let cases = [
            ("127.0.0.1", Some("a loopback address")),
            ("127.255.0.9", Some("a loopback address")),
            ("0.0.0.0", Some("an unspecified address")),
            ("0.1.2.3", Some("a \"this network\" address")),
            ("10.9.8.7", Some("a private address")),
            ("172.31.255.255", Some("a private address")),
            ("192.168.1.1", Some("a private address")),
            (
                "100.100.100.200",
                Some("a shared (carrier-grade NAT) address"),
            ),
            ("169.254.169.254", Some("a link-local address")),
            ("192.0.0.192", Some("an IETF protocol address")),
            ("198.19.0.1", Some("a benchmarking address")),
            ("224.0.0.1", Some("a multicast address")),
            ("255.255.255.255", Some("the broadcast address")),
            ("240.0.0.1", Some("a reserved address")),
            ("::", Some("an unspecified address")),
            ("::1", Some("a loopback address")),
            ("fe80::1", Some("a link-local address")),
            ("fec0::1", Some("a site-local address")),
            ("fd00:ec2::254", Some("a unique-local address")),
            ("ff02::1", Some("a multicast address")),
            ("64:ff9b:1::a00:1", Some("a local-use NAT64 address")),
            (
                "::ffff:127.0.0.1",
                Some("the IPv4-mapped form of 127.0.0.1, a loopback address"),
            ),
            (
                "::ffff:0:10.0.0.1",
                Some("the IPv4-translated form of 10.0.0.1, a private address"),
            ),
            (
                "::169.254.169.254",
                Some("the IPv4-compatible form of 169.254.169.254, a link-local address"),
            ),
            (
                "64:ff9b::7f00:1",
                Some("the NAT64 form of 127.0.0.1, a loopback address"),
            ),
            (
                "2002:a9fe:a9fe::1",
                Some("the 6to4 form of 169.254.169.254, a link-local address"),
            ),
            (
                "2001:0:4136:e378:8000:63bf:80ff:fffe",
                Some("the Teredo form of 127.0.0.1, a loopback address"),
            ),
            ("8.8.8.8", None),
            ("172.32.0.1", None),
            ("100.128.0.1", None),
            ("2606:4700:4700::1111", None),
            ("::ffff:8.8.8.8", None),
            ("64:ff9b::808:808", None),
            ("2002:808:808::1", None),
        ];
        for (ip, expected) in cases {
            let ip: IpAddr = ip.parse().unwrap();
            assert_eq!(internal(ip).as_deref(), expected, "{ip}");
        }
    }

    #[test]
    fn a_grant_admits_its_names_addresses_and_ranges_on_their_ports() {
        let allow: Vec<NetTarget> = ["wiki.internal:8080", "10.1.2.3:443", "fd00::/8"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(
            Reach::of(&allow, Host::of("wiki.internal"), 8080),
            Reach::Anything
        );
        let other_port = Reach::of(&allow, Host::of("wiki.internal"), 22);
        assert!(other_port.refuses(ip("10.1.2.3")).is_some());
        assert!(other_port.refuses(ip("fd00::1")).is_none());
        assert!(other_port.refuses(ip("8.8.8.8")).is_none());
        let https = Reach::of(&allow, Host::of("10.1.2.3"), 443);
        assert!(https.refuses(ip("10.1.2.3")).is_none());
        assert!(https.refuses(ip("::ffff:10.1.2.3")).is_none());
        assert!(https.refuses(ip("10.1.2.4")).is_some());
        assert_eq!(Host::of("[::1]"), Host::Ip(ip("::1")));
        assert_eq!(Host::of("localhost"), Host::Name("localhost"));
    }
}
