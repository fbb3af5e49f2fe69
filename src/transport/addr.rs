//! Where a peer is reached: an IP address and port, or a DNS name and port
//! ([`PeerAddr`]), and how names are resolved ([`Resolve`]).
//!
//! A name is resolved again on every connect attempt of the peer's outbound task (never
//! cached by tenure), so a peer that moved (a rescheduled pod, a replaced VM) is reached
//! at its new address from the next attempt on. Whom a connection reaches is decided by
//! the certificate it presents, never by the address (`docs/design.md`, Transport).

use std::fmt;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The longest DNS name accepted (RFC 1035, without the trailing dot).
const MAX_NAME: usize = 253;
/// The longest label of a DNS name.
const MAX_LABEL: usize = 63;

/// Where a peer listens: `10.0.0.4:7000`, `[fd00::4]:7000` or `worker-4.workers.svc:7000`.
///
/// Parse one with [`str::parse`]; a [`SocketAddr`] converts with `From`. Its
/// [`Display`](fmt::Display) form parses back to the same value, and is the form stored
/// in the replicated membership: an IP address is written exactly as a [`SocketAddr`]
/// was before names existed, so older stores and older nodes read it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PeerAddr {
    /// An IP address and port: used as it is.
    Ip(SocketAddr),
    /// A DNS name and port: resolved on every connect attempt.
    Name {
        /// The host name (a DNS name, `localhost`, a name in `/etc/hosts`), lowercase as
        /// given.
        host: String,
        /// The UDP port.
        port: u16,
    },
}

impl PeerAddr {
    /// The port.
    pub fn port(&self) -> u16 {
        match self {
            PeerAddr::Ip(a) => a.port(),
            PeerAddr::Name { port, .. } => *port,
        }
    }

    /// The IP address and port, if this is not a name.
    pub fn ip(&self) -> Option<SocketAddr> {
        match self {
            PeerAddr::Ip(a) => Some(*a),
            PeerAddr::Name { .. } => None,
        }
    }

    /// Whether this is a name (resolved on every connect attempt).
    pub fn is_name(&self) -> bool {
        matches!(self, PeerAddr::Name { .. })
    }

    /// Where this node listens when this is its own entry and no listen address is set:
    /// the address itself, or for a name the unspecified address (`0.0.0.0`) on its
    /// port (a name may resolve to an address of this host only once it runs, as a pod's
    /// does).
    pub fn listen_addr(&self) -> SocketAddr {
        match self {
            PeerAddr::Ip(a) => *a,
            PeerAddr::Name { port, .. } => SocketAddr::from(([0, 0, 0, 0], *port)),
        }
    }

    /// Every address this resolves to now, through `resolver` (an IP address: itself).
    /// A name that resolves to nothing is an error.
    pub async fn resolve(&self, resolver: &dyn Resolve) -> io::Result<Vec<SocketAddr>> {
        match self {
            PeerAddr::Ip(a) => Ok(vec![*a]),
            PeerAddr::Name { host, port } => {
                let addrs = resolver.resolve(host, *port).await?;
                if addrs.is_empty() {
                    return Err(io::Error::new(
                        io::ErrorKind::NotFound,
                        format!("{host} resolves to no address"),
                    ));
                }
                Ok(addrs)
            }
        }
    }
}

impl From<SocketAddr> for PeerAddr {
    fn from(a: SocketAddr) -> Self {
        PeerAddr::Ip(a)
    }
}

impl fmt::Display for PeerAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PeerAddr::Ip(a) => a.fmt(f),
            PeerAddr::Name { host, port } => write!(f, "{host}:{port}"),
        }
    }
}

/// A string that is not `host:port`. Displays as `'foo' is not host:port (no port)`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{input}' is not host:port ({reason})")]
pub struct PeerAddrError {
    /// What was given.
    pub input: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl FromStr for PeerAddr {
    type Err = PeerAddrError;

    /// `IP:PORT`, `[IPv6]:PORT` or `NAME:PORT`, where NAME is a DNS name (letters, digits,
    /// `-`, `_`, dot-separated labels of at most 63 bytes, at most 253 in all).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |reason| PeerAddrError {
            input: s.to_string(),
            reason,
        };
        if let Ok(a) = s.parse::<SocketAddr>() {
            return Ok(PeerAddr::Ip(a));
        }
        let (host, port) = s.rsplit_once(':').ok_or_else(|| bad("no port"))?;
        if host.starts_with('[') || host.contains(':') {
            return Err(bad("an IPv6 address goes in brackets: [addr]:port"));
        }
        if port.is_empty() {
            return Err(bad("no port"));
        }
        let port: u16 = port.parse().map_err(|_| bad("the port is not 0-65535"))?;
        if host.is_empty() {
            return Err(bad("no host"));
        }
        let name = host.strip_suffix('.').unwrap_or(host);
        if name.len() > MAX_NAME {
            return Err(bad("the name is longer than 253 bytes"));
        }
        for label in name.split('.') {
            if label.is_empty() || label.len() > MAX_LABEL {
                return Err(bad("a part of the name is empty or longer than 63 bytes"));
            }
            if !label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            {
                return Err(bad(
                    "the name has a character other than a-z, 0-9, '-', '_', '.'",
                ));
            }
            if label.starts_with('-') || label.ends_with('-') {
                return Err(bad("a part of the name begins or ends with '-'"));
            }
        }
        if name.parse::<std::net::Ipv4Addr>().is_err()
            && name
                .split('.')
                .all(|l| l.bytes().all(|b| b.is_ascii_digit()))
        {
            return Err(bad("digits and dots only, but not an IPv4 address"));
        }
        Ok(PeerAddr::Name {
            host: host.to_string(),
            port,
        })
    }
}

impl Serialize for PeerAddr {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for PeerAddr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// What takes a peer's address ([`ConfigBuilder::peer`](crate::ConfigBuilder::peer)):
/// a [`SocketAddr`], a [`PeerAddr`], or a string to parse (`"10.0.0.4:7000"`,
/// `"worker-4.workers.svc:7000"`).
pub trait ToPeerAddr {
    /// The address, or why the string is not one.
    fn to_peer_addr(self) -> Result<PeerAddr, PeerAddrError>;
}

impl ToPeerAddr for PeerAddr {
    fn to_peer_addr(self) -> Result<PeerAddr, PeerAddrError> {
        Ok(self)
    }
}

impl ToPeerAddr for &PeerAddr {
    fn to_peer_addr(self) -> Result<PeerAddr, PeerAddrError> {
        Ok(self.clone())
    }
}

impl ToPeerAddr for SocketAddr {
    fn to_peer_addr(self) -> Result<PeerAddr, PeerAddrError> {
        Ok(PeerAddr::Ip(self))
    }
}

impl ToPeerAddr for &str {
    fn to_peer_addr(self) -> Result<PeerAddr, PeerAddrError> {
        self.parse()
    }
}

impl ToPeerAddr for String {
    fn to_peer_addr(self) -> Result<PeerAddr, PeerAddrError> {
        self.parse()
    }
}

impl ToPeerAddr for &String {
    fn to_peer_addr(self) -> Result<PeerAddr, PeerAddrError> {
        self.parse()
    }
}

/// A future that resolves a name ([`Resolve::resolve`]).
pub type Resolving = Pin<Box<dyn Future<Output = io::Result<Vec<SocketAddr>>> + Send + 'static>>;

/// How a transport turns a name into addresses. The default is [`SystemResolver`]
/// (the operating system's resolver: `/etc/hosts`, DNS); tests swap in their own to move
/// a name to another address without touching DNS.
pub trait Resolve: Send + Sync + 'static {
    /// The addresses `host` resolves to now, each with `port`. Called on every connect
    /// attempt to a named peer, from that peer's task only (a slow answer delays no
    /// other peer); the transport bounds how long it waits.
    fn resolve(&self, host: &str, port: u16) -> Resolving;
}

/// The operating system's resolver, through [`tokio::net::lookup_host`] (`getaddrinfo`
/// on a blocking thread): `/etc/hosts`, then DNS, as `nsswitch.conf` says. tenure caches
/// nothing; whatever the system caches (nscd, systemd-resolved) follows its TTLs.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemResolver;

impl Resolve for SystemResolver {
    fn resolve(&self, host: &str, port: u16) -> Resolving {
        let host = host.to_string();
        Box::pin(async move {
            Ok(tokio::net::lookup_host((host.as_str(), port))
                .await?
                .collect())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ip_literals_names_and_v6_parse_and_display_back() {
        for s in [
            "127.0.0.1:7001",
            "[::1]:7001",
            "[fd00::4]:0",
            "localhost:7001",
            "worker-0.workers.svc:7100",
            "worker-0.workers.svc.cluster.local.:7100",
            "a_b.example:1",
            "n1:65535",
        ] {
            let a: PeerAddr = s.parse().unwrap_or_else(|e| panic!("{s}: {e}"));
            assert_eq!(a.to_string(), s);
            assert_eq!(a.to_string().parse::<PeerAddr>().unwrap(), a);
        }
        assert_eq!(
            "10.0.0.4:7004".parse::<PeerAddr>().unwrap(),
            PeerAddr::Ip("10.0.0.4:7004".parse().unwrap())
        );
        let n: PeerAddr = "worker-0.workers.svc:7100".parse().unwrap();
        assert_eq!(
            n,
            PeerAddr::Name {
                host: "worker-0.workers.svc".into(),
                port: 7100
            }
        );
        assert!(n.is_name() && n.ip().is_none() && n.port() == 7100);
        assert_eq!(n.listen_addr(), "0.0.0.0:7100".parse().unwrap());
        let sock: SocketAddr = "[::1]:9".parse().unwrap();
        assert_eq!(PeerAddr::from(sock).ip(), Some(sock));
        assert_eq!(PeerAddr::from(sock).listen_addr(), sock);
    }

    #[test]
    fn malformed_addresses_say_what_is_wrong() {
        for (s, why) in [
            ("foo", "no port"),
            ("", "no port"),
            ("foo:", "no port"),
            (":7001", "no host"),
            ("foo:70000", "port"),
            ("foo:x", "port"),
            ("::1:7001", "brackets"),
            ("[::1:7001", "brackets"),
            ("[nothost]:1", "brackets"),
            ("a..b:1", "empty"),
            ("-a.b:1", "'-'"),
            ("a b:1", "character"),
            ("host/x:1", "character"),
            ("300.1.1.1:1", "IPv4"),
            ("1.2.3:1", "IPv4"),
        ] {
            let e = s.parse::<PeerAddr>().unwrap_err();
            let text = e.to_string();
            assert!(
                text.starts_with(&format!("'{s}' is not host:port")) && text.contains(why),
                "{s}: {text}"
            );
        }
        let long = format!("{}:1", "a".repeat(64));
        assert!(long.parse::<PeerAddr>().is_err());
        let longer = format!("{}:1", ["abc"; 70].join("."));
        assert!(longer.parse::<PeerAddr>().is_err());
    }

    #[test]
    fn serde_form_is_the_socket_addr_form_for_ip_addresses() {
        // What a store written before names holds: SocketAddr's JSON form.
        let old: SocketAddr = "10.0.0.4:7004".parse().unwrap();
        let old_json = serde_json::to_string(&old).unwrap();
        let a: PeerAddr = serde_json::from_str(&old_json).unwrap();
        assert_eq!(a, PeerAddr::Ip(old));
        assert_eq!(serde_json::to_string(&a).unwrap(), old_json);
        let v6: SocketAddr = "[fd00::4]:7004".parse().unwrap();
        let back: PeerAddr = serde_json::from_str(&serde_json::to_string(&v6).unwrap()).unwrap();
        assert_eq!(back, PeerAddr::Ip(v6));
        let n: PeerAddr = "n4.lab:7000".parse().unwrap();
        assert_eq!(serde_json::to_string(&n).unwrap(), r#""n4.lab:7000""#);
        assert_eq!(
            serde_json::from_str::<PeerAddr>(r#""n4.lab:7000""#).unwrap(),
            n
        );
        assert!(serde_json::from_str::<PeerAddr>(r#""nope""#).is_err());
        assert!(serde_json::from_str::<PeerAddr>("7").is_err());
    }

    #[tokio::test]
    async fn the_system_resolver_resolves_localhost_and_fails_on_nonsense() {
        let a: PeerAddr = "localhost:7001".parse().unwrap();
        let got = a.resolve(&SystemResolver).await.unwrap();
        assert!(!got.is_empty() && got.iter().all(|s| s.ip().is_loopback() && s.port() == 7001));
        let ip: PeerAddr = "127.0.0.9:1".parse().unwrap();
        assert_eq!(
            ip.resolve(&SystemResolver).await.unwrap(),
            vec!["127.0.0.9:1".parse().unwrap()]
        );
        let bad: PeerAddr = "no-such-host.invalid:1".parse().unwrap();
        assert!(bad.resolve(&SystemResolver).await.is_err());
    }
}
