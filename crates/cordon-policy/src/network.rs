//! Egress policy: which destinations the sandbox's proxy may reach. Pure data and matching: no
//! sockets, no DNS, no syscalls. The proxy (`cordon-net`) asks two questions:
//!
//! 1. [`EgressRules::check_host`] — may the client name this `host:port` at all? (allowlist of
//!    names, IP literals refused unless an explicit IP/CIDR entry lists them);
//! 2. [`EgressRules::check_addr`] — the proxy resolved the name itself; may it connect to this
//!    address? (loopback, private, link-local, cloud-metadata and other special ranges refused
//!    unless an explicit IP/CIDR entry lists them).
//!
//! # Entry syntax (`--allow-net`, `[network] allow = [...]`)
//!
//! | entry | matches |
//! |---|---|
//! | `example.com` | exactly `example.com`, ports 80 and 443 |
//! | `example.com:8443` | exactly `example.com`, port 8443 only |
//! | `example.com:*` | exactly `example.com`, any port |
//! | `*.example.com` | any name *below* `example.com` (`a.example.com`, `a.b.example.com`) but **not** the apex `example.com` itself (list it separately), ports 80 and 443 |
//! | `203.0.113.7`, `203.0.113.7:8080`, `[2001:db8::1]:443`, `2001:db8::1` | that address: as an IP-literal host, and as a resolved address even in a special range |
//! | `10.0.0.0/8`, `10.0.0.0/8:5000`, `[fd00::/8]:443`, `fd00::/8` | every address in the network, same meaning |
//!
//! Ports default to 80 and 443 for every kind of entry, CIDRs included; `:PORT` narrows to one
//! port and `:*` widens to all. An IP/CIDR entry never makes a *name* allowed: a name must be
//! listed by name (or wildcard) even when it resolves into a listed network. An IP/CIDR entry
//! does exempt its addresses (on its ports) from the special-range check, which is how a test
//! or an on-premises deployment reaches e.g. `127.0.0.2` or `10.1.2.3`.
//!
//! # Name normalisation
//!
//! Hosts from the client and names in entries go through the same steps ([`Host::parse`]):
//! IDNA (UTS #46) mapping to ASCII — which lowercases, maps full-width characters and
//! ideographic full stops — then one trailing dot is removed, and every label must be 1–63
//! characters of `a-z 0-9 - _` (253 in total). A name whose last label is numeric (`127.1`,
//! `0x7f.1`, `2130706433`) is an IPv4 literal in the lenient `inet_aton` sense every resolver
//! and browser accepts, and is treated as such — never as a name. Matching is exact on whole
//! labels: `allowed.test.evil.test` does not match `allowed.test`, `evilallowed.test` does not
//! match `*.allowed.test`.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::profile::ProfileError;

/// Why the proxy refuses every request of a sandbox whose allowlist is empty.
pub const NETWORK_OFF: &str = "network is off";

/// The field name errors in allow entries are reported under.
const FIELD: &str = "--allow-net";
/// The field name errors in the static hosts map are reported under.
const HOSTS_FIELD: &str = "network.hosts";

/// Ports an entry without `:PORT` allows.
pub const DEFAULT_PORTS: [u16; 2] = [80, 443];

/// The `[network]` section of a profile.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkPolicy {
    /// `DOMAIN[:PORT]`, `*.DOMAIN[:PORT]`, `IP[:PORT]` or `CIDR` entries. Empty: no network.
    #[serde(default)]
    pub allow: Vec<String>,
    /// Names the proxy resolves to fixed addresses instead of asking DNS. A name listed here
    /// must still be allowed by `allow`; its address still goes through the special-range check.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = BTreeMap<String, String>))]
    pub hosts: BTreeMap<String, IpAddr>,
}

impl NetworkPolicy {
    /// True when the sandbox gets an egress proxy at all.
    pub fn is_enabled(&self) -> bool {
        !self.allow.is_empty()
    }

    pub fn validate(&self) -> Result<(), ProfileError> {
        self.compile().map(|_| ())
    }

    /// Parse every entry into matching rules. Also checks that every `hosts` key is a valid
    /// name (not an IP literal).
    pub fn compile(&self) -> Result<EgressRules, ProfileError> {
        let entries = self
            .allow
            .iter()
            .map(|e| AllowEntry::parse(e))
            .collect::<Result<Vec<_>, _>>()?;
        self.static_hosts()?;
        Ok(EgressRules { entries })
    }

    /// The `hosts` map with normalised keys, ready for lookups with a [`Host::Name`].
    pub fn static_hosts(&self) -> Result<BTreeMap<String, IpAddr>, ProfileError> {
        let mut out = BTreeMap::new();
        for (name, ip) in &self.hosts {
            match Host::parse(name) {
                Ok(Host::Name(n)) => {
                    out.insert(n, *ip);
                }
                Ok(Host::Ip(_)) => {
                    return Err(ProfileError::invalid(
                        HOSTS_FIELD,
                        format!("'{name}' is an IP address, not a name"),
                    ))
                }
                Err(e) => return Err(ProfileError::invalid(HOSTS_FIELD, e.to_string())),
            }
        }
        Ok(out)
    }
}

// ---------------------------------------------------------------------------------------------
// Hosts

/// Why a host string is not a usable host.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostError {
    #[error("empty host")]
    Empty,
    #[error("invalid host name '{0}'")]
    InvalidName(String),
    #[error("malformed IP address '{0}'")]
    MalformedIp(String),
    #[error("invalid port '{0}'")]
    InvalidPort(String),
}

/// A normalised host: a lowercase ASCII name without trailing dot, or a canonical address
/// (IPv4-mapped IPv6 becomes IPv4).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Host {
    Name(String),
    Ip(IpAddr),
}

impl Host {
    /// Normalise a host as a client might write it in a URL, a `Host` header, a `CONNECT`
    /// target or a TLS SNI: `Example.COM.`, `bücher.example`, `127.1`, `0x7f000001`,
    /// `[::1]`, `::ffff:127.0.0.1`. No port.
    pub fn parse(text: &str) -> Result<Host, HostError> {
        if text.is_empty() {
            return Err(HostError::Empty);
        }
        if let Some(inner) = text.strip_prefix('[') {
            let inner = inner
                .strip_suffix(']')
                .ok_or_else(|| HostError::MalformedIp(text.to_string()))?;
            return inner
                .parse::<Ipv6Addr>()
                .map(|ip| Host::Ip(canonical_ip(IpAddr::V6(ip))))
                .map_err(|_| HostError::MalformedIp(text.to_string()));
        }
        if text.contains(':') {
            return text
                .parse::<Ipv6Addr>()
                .map(|ip| Host::Ip(canonical_ip(IpAddr::V6(ip))))
                .map_err(|_| HostError::MalformedIp(text.to_string()));
        }
        let invalid = || HostError::InvalidName(text.to_string());
        // UTS #46 with the URL standard's forbidden code points; lowercases, maps full-width
        // forms and U+3002 to '.', validates and converts A-labels.
        let ascii = idna::domain_to_ascii_cow(text.as_bytes(), idna::AsciiDenyList::URL)
            .map_err(|_| invalid())?;
        let name = ascii.strip_suffix('.').unwrap_or(&ascii);
        if name.is_empty() || name.len() > 253 {
            return Err(invalid());
        }
        let labels: Vec<&str> = name.split('.').collect();
        if labels.iter().any(|l| l.is_empty() || l.len() > 63) {
            return Err(invalid());
        }
        if labels.last().is_some_and(|l| looks_numeric(l)) {
            return parse_ipv4_lenient(&labels)
                .map(|ip| Host::Ip(IpAddr::V4(ip)))
                .ok_or_else(|| HostError::MalformedIp(text.to_string()));
        }
        let ok = name.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_' || b == b'.'
        });
        if !ok {
            return Err(invalid());
        }
        Ok(Host::Name(name.to_string()))
    }

    pub fn is_ip(&self) -> bool {
        matches!(self, Host::Ip(_))
    }

    /// `host:port` as it goes on the wire (IPv6 bracketed).
    pub fn with_port(&self, port: u16) -> String {
        match self {
            Host::Ip(IpAddr::V6(ip)) => format!("[{ip}]:{port}"),
            other => format!("{other}:{port}"),
        }
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(n) => f.write_str(n),
            Host::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

impl FromStr for Host {
    type Err = HostError;
    fn from_str(s: &str) -> Result<Host, HostError> {
        Host::parse(s)
    }
}

/// Split `host[:port]` / `[v6][:port]` (an HTTP authority without userinfo) and normalise the
/// host. A bare IPv6 address without brackets is accepted (no port then).
pub fn parse_authority(text: &str) -> Result<(Host, Option<u16>), HostError> {
    let (host, port) = split_host_port(text)?;
    let port = port.map(parse_port).transpose()?;
    Ok((Host::parse(host)?, port))
}

/// Split off a `:port` suffix, keeping brackets on the host.
fn split_host_port(text: &str) -> Result<(&str, Option<&str>), HostError> {
    if text.starts_with('[') {
        let end = text
            .find(']')
            .ok_or_else(|| HostError::MalformedIp(text.to_string()))?;
        let (host, rest) = text.split_at(end + 1);
        if rest.is_empty() {
            return Ok((host, None));
        }
        return match rest.strip_prefix(':') {
            Some(p) => Ok((host, Some(p))),
            None => Err(HostError::MalformedIp(text.to_string())),
        };
    }
    match text.matches(':').count() {
        0 => Ok((text, None)),
        1 => {
            let (h, p) = text.split_once(':').unwrap_or((text, ""));
            Ok((h, Some(p)))
        }
        // Unbracketed IPv6: no port possible.
        _ => Ok((text, None)),
    }
}

fn parse_port(text: &str) -> Result<u16, HostError> {
    if text.is_empty() || text.len() > 5 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(HostError::InvalidPort(text.to_string()));
    }
    match text.parse::<u16>() {
        Ok(p) if p != 0 => Ok(p),
        _ => Err(HostError::InvalidPort(text.to_string())),
    }
}

/// A label a lenient IPv4 parser would take as a number: decimal digits, or `0x` followed by
/// (possibly no) hex digits.
fn looks_numeric(label: &str) -> bool {
    if let Some(hex) = label
        .strip_prefix("0x")
        .or_else(|| label.strip_prefix("0X"))
    {
        return hex.bytes().all(|b| b.is_ascii_hexdigit());
    }
    !label.is_empty() && label.bytes().all(|b| b.is_ascii_digit())
}

/// One part of a lenient IPv4 literal: decimal, octal with a leading `0`, hex with `0x`.
fn parse_ipv4_part(part: &str) -> Option<u64> {
    let (digits, radix) =
        if let Some(h) = part.strip_prefix("0x").or_else(|| part.strip_prefix("0X")) {
            (h, 16)
        } else if part.len() > 1 && part.starts_with('0') {
            (&part[1..], 8)
        } else {
            (part, 10)
        };
    let mut value: u64 = 0;
    for c in digits.chars() {
        let d = c.to_digit(radix)?;
        value = value
            .checked_mul(u64::from(radix))?
            .checked_add(u64::from(d))?;
        if value > u64::from(u32::MAX) {
            return None;
        }
    }
    Some(value)
}

/// The IPv4 parser of the URL standard (and of `inet_aton`): 1 to 4 parts, the last one filling
/// the remaining bytes. `None` when malformed.
fn parse_ipv4_lenient(labels: &[&str]) -> Option<Ipv4Addr> {
    if labels.is_empty() || labels.len() > 4 {
        return None;
    }
    let nums: Vec<u64> = labels
        .iter()
        .map(|l| parse_ipv4_part(l))
        .collect::<Option<_>>()?;
    let (last, init) = nums.split_last()?;
    if init.iter().any(|&n| n > 255) {
        return None;
    }
    let rest_bits = 8 * (4 - init.len() as u32);
    if *last >= 1u64 << rest_bits {
        return None;
    }
    let mut value: u64 = 0;
    for (i, n) in init.iter().enumerate() {
        value |= n << (24 - 8 * i as u32);
    }
    value |= last;
    u32::try_from(value).ok().map(Ipv4Addr::from)
}

/// The address a socket actually talks to: an IPv4-mapped IPv6 address is its IPv4 address.
pub fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => ip,
        },
        v4 => v4,
    }
}

// ---------------------------------------------------------------------------------------------
// Networks and entries

/// An IP network (`addr/prefix`), stored canonical and masked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IpNet {
    addr: IpAddr,
    prefix: u8,
}

impl IpNet {
    /// `None` when the prefix is too long for the address family.
    pub fn new(addr: IpAddr, prefix: u8) -> Option<IpNet> {
        let (addr, prefix) = match addr {
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) if prefix >= 96 => (IpAddr::V4(v4), prefix - 96),
                _ => (addr, prefix),
            },
            v4 => (v4, prefix),
        };
        let addr = match addr {
            IpAddr::V4(a) if prefix <= 32 => {
                IpAddr::V4(Ipv4Addr::from(mask32(u32::from(a), prefix)))
            }
            IpAddr::V6(a) if prefix <= 128 => {
                IpAddr::V6(Ipv6Addr::from(mask128(u128::from(a), prefix)))
            }
            _ => return None,
        };
        Some(IpNet { addr, prefix })
    }

    /// The single-address network.
    pub fn host(addr: IpAddr) -> IpNet {
        let addr = canonical_ip(addr);
        let prefix = if addr.is_ipv4() { 32 } else { 128 };
        IpNet { addr, prefix }
    }

    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    /// Whether the (canonicalised) address is inside.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, canonical_ip(ip)) {
            (IpAddr::V4(net), IpAddr::V4(a)) => mask32(u32::from(a), self.prefix) == u32::from(net),
            (IpAddr::V6(net), IpAddr::V6(a)) => {
                mask128(u128::from(a), self.prefix) == u128::from(net)
            }
            _ => false,
        }
    }

    fn is_single(&self) -> bool {
        self.prefix == if self.addr.is_ipv4() { 32 } else { 128 }
    }
}

fn mask32(a: u32, prefix: u8) -> u32 {
    if prefix == 0 {
        0
    } else {
        a & (u32::MAX << (32 - u32::from(prefix.min(32))))
    }
}

fn mask128(a: u128, prefix: u8) -> u128 {
    if prefix == 0 {
        0
    } else {
        a & (u128::MAX << (128 - u32::from(prefix.min(128))))
    }
}

impl fmt::Display for IpNet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_single() {
            write!(f, "{}", self.addr)
        } else {
            write!(f, "{}/{}", self.addr, self.prefix)
        }
    }
}

/// Which ports an entry allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ports {
    /// 80 and 443 ([`DEFAULT_PORTS`]).
    Default,
    One(u16),
    Any,
}

impl Ports {
    pub fn contains(&self, port: u16) -> bool {
        match self {
            Ports::Default => DEFAULT_PORTS.contains(&port),
            Ports::One(p) => *p == port,
            Ports::Any => true,
        }
    }
}

/// What an entry names.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Target {
    /// Exactly this normalised name.
    Domain(String),
    /// Strictly below this normalised name (`*.example.com` stores `example.com`); the apex is
    /// not included.
    Subdomains(String),
    /// Addresses in this network (a single address is a /32 or /128).
    Net(IpNet),
}

/// One parsed `--allow-net` entry.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AllowEntry {
    pub target: Target,
    pub ports: Ports,
}

impl AllowEntry {
    /// Parse one entry; see the module documentation for the syntax.
    pub fn parse(text: &str) -> Result<AllowEntry, ProfileError> {
        let err = |why: &str| {
            ProfileError::invalid(
                FIELD,
                format!(
                    "'{text}' {why}; expected DOMAIN[:PORT], *.DOMAIN[:PORT], IP[:PORT] or CIDR[:PORT], \
                     e.g. pypi.org, api.example.com:8443, 10.1.2.3 or 10.0.0.0/8"
                ),
            )
        };
        if text.is_empty() || text.contains(|c: char| c.is_whitespace() || c.is_control()) {
            return Err(err("is empty or contains whitespace"));
        }
        if text.contains(['/', '@', '?', '#']) && !is_cidr_shaped(text) {
            return Err(err("is not a host"));
        }
        let (host, port) = split_host_port(text).map_err(|e| err(&e.to_string()))?;
        let ports = match port {
            None => Ports::Default,
            Some("*") => Ports::Any,
            Some(p) => Ports::One(parse_port(p).map_err(|e| err(&e.to_string()))?),
        };
        // Brackets are only for IPv6: "[fd00::/8]" or "[::1]".
        let bare = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        let bracketed = bare.len() != host.len();
        if let Some((addr, prefix)) = bare.split_once('/') {
            let addr: IpAddr = addr
                .parse()
                .map_err(|_| err("has a malformed network address"))?;
            if bracketed && !addr.is_ipv6() {
                return Err(err("brackets an IPv4 network"));
            }
            let prefix: u8 = match prefix.parse() {
                Ok(p) if prefix.bytes().all(|b| b.is_ascii_digit()) => p,
                _ => return Err(err("has a malformed prefix length")),
            };
            let net =
                IpNet::new(addr, prefix).ok_or_else(|| err("has a prefix length too long"))?;
            if net.prefix() == 0 {
                return Err(err("allows every address; list the networks you need"));
            }
            return Ok(AllowEntry {
                target: Target::Net(net),
                ports,
            });
        }
        if bracketed || bare.contains(':') {
            let ip: Ipv6Addr = bare
                .parse()
                .map_err(|_| err("has a malformed IPv6 address"))?;
            return Ok(AllowEntry {
                target: Target::Net(IpNet::host(IpAddr::V6(ip))),
                ports,
            });
        }
        if let Ok(ip) = bare.parse::<Ipv4Addr>() {
            return Ok(AllowEntry {
                target: Target::Net(IpNet::host(IpAddr::V4(ip))),
                ports,
            });
        }
        let (wildcard, name) = match bare.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, bare),
        };
        if name.contains('*') {
            return Err(err("has a '*' that is not a leading '*.' label"));
        }
        match Host::parse(name) {
            Ok(Host::Name(n)) if wildcard => Ok(AllowEntry {
                target: Target::Subdomains(n),
                ports,
            }),
            Ok(Host::Name(n)) => Ok(AllowEntry {
                target: Target::Domain(n),
                ports,
            }),
            Ok(Host::Ip(ip)) if !wildcard => Err(err(&format!(
                "is an IP address in an unusual spelling; write it as {ip}"
            ))),
            Ok(Host::Ip(_)) => Err(err("puts a wildcard on an IP address")),
            Err(e) => Err(err(&e.to_string())),
        }
    }
}

fn is_cidr_shaped(text: &str) -> bool {
    text.matches('/').count() == 1 && !text.contains(['@', '?', '#'])
}

impl FromStr for AllowEntry {
    type Err = ProfileError;
    fn from_str(s: &str) -> Result<AllowEntry, ProfileError> {
        AllowEntry::parse(s)
    }
}

impl fmt::Display for AllowEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v6 = matches!(&self.target, Target::Net(n) if n.addr().is_ipv6());
        let bracket = v6 && self.ports != Ports::Default;
        if bracket {
            f.write_str("[")?;
        }
        match &self.target {
            Target::Domain(d) => f.write_str(d)?,
            Target::Subdomains(d) => write!(f, "*.{d}")?,
            Target::Net(n) => write!(f, "{n}")?,
        }
        if bracket {
            f.write_str("]")?;
        }
        match self.ports {
            Ports::Default => Ok(()),
            Ports::One(p) => write!(f, ":{p}"),
            Ports::Any => f.write_str(":*"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Special address ranges

/// A range of addresses the proxy never connects to unless an IP/CIDR entry lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SpecialRange {
    Unspecified,
    /// 0.0.0.0/8.
    ThisNetwork,
    Loopback,
    /// 10/8, 172.16/12, 192.168/16.
    Private,
    /// 100.64/10, carrier-grade NAT.
    SharedAddressSpace,
    LinkLocal,
    /// 169.254.169.254, 169.254.170.2, 100.100.100.200, fd00:ec2::254.
    CloudMetadata,
    Multicast,
    Broadcast,
    Documentation,
    Benchmarking,
    /// 192.0.0.0/24 and 2001::/23.
    ProtocolAssignments,
    /// 240/4, 192.88.99.0/24 and IPv6 outside 2000::/3 not otherwise named.
    Reserved,
    /// fc00::/7.
    UniqueLocal,
    /// fec0::/10 (deprecated).
    SiteLocal,
    /// ::/96 other than :: and ::1 (deprecated IPv4-compatible IPv6).
    Ipv4Compatible,
    /// 2001::/32.
    Teredo,
    /// 64:ff9b:1::/48.
    LocalNat64,
    /// 100::/64.
    DiscardOnly,
}

impl SpecialRange {
    pub fn describe(&self) -> &'static str {
        match self {
            SpecialRange::Unspecified => "unspecified",
            SpecialRange::ThisNetwork => "this-network",
            SpecialRange::Loopback => "loopback",
            SpecialRange::Private => "private",
            SpecialRange::SharedAddressSpace => "carrier-grade NAT",
            SpecialRange::LinkLocal => "link-local",
            SpecialRange::CloudMetadata => "cloud metadata",
            SpecialRange::Multicast => "multicast",
            SpecialRange::Broadcast => "broadcast",
            SpecialRange::Documentation => "documentation",
            SpecialRange::Benchmarking => "benchmarking",
            SpecialRange::ProtocolAssignments => "IETF protocol assignment",
            SpecialRange::Reserved => "reserved",
            SpecialRange::UniqueLocal => "unique-local",
            SpecialRange::SiteLocal => "site-local",
            SpecialRange::Ipv4Compatible => "IPv4-compatible",
            SpecialRange::Teredo => "Teredo",
            SpecialRange::LocalNat64 => "local-use NAT64",
            SpecialRange::DiscardOnly => "discard-only",
        }
    }
}

/// Why an address is special: its range, and for 6to4/NAT64 addresses the embedded IPv4 address
/// that put it there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Special {
    pub range: SpecialRange,
    /// `("6to4" | "NAT64", embedded address)`.
    pub embedded: Option<(&'static str, Ipv4Addr)>,
}

impl fmt::Display for Special {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.embedded {
            Some((how, v4)) => write!(
                f,
                "{how} address embedding {} address {v4}",
                self.range.describe()
            ),
            None => write!(f, "{} address", self.range.describe()),
        }
    }
}

const V4_SPECIAL: &[([u8; 4], u8, SpecialRange)] = &[
    ([169, 254, 169, 254], 32, SpecialRange::CloudMetadata),
    ([169, 254, 170, 2], 32, SpecialRange::CloudMetadata),
    ([100, 100, 100, 200], 32, SpecialRange::CloudMetadata),
    ([255, 255, 255, 255], 32, SpecialRange::Broadcast),
    ([0, 0, 0, 0], 32, SpecialRange::Unspecified),
    ([0, 0, 0, 0], 8, SpecialRange::ThisNetwork),
    ([10, 0, 0, 0], 8, SpecialRange::Private),
    ([100, 64, 0, 0], 10, SpecialRange::SharedAddressSpace),
    ([127, 0, 0, 0], 8, SpecialRange::Loopback),
    ([169, 254, 0, 0], 16, SpecialRange::LinkLocal),
    ([172, 16, 0, 0], 12, SpecialRange::Private),
    ([192, 0, 0, 0], 24, SpecialRange::ProtocolAssignments),
    ([192, 0, 2, 0], 24, SpecialRange::Documentation),
    ([192, 88, 99, 0], 24, SpecialRange::Reserved),
    ([192, 168, 0, 0], 16, SpecialRange::Private),
    ([198, 18, 0, 0], 15, SpecialRange::Benchmarking),
    ([198, 51, 100, 0], 24, SpecialRange::Documentation),
    ([203, 0, 113, 0], 24, SpecialRange::Documentation),
    ([224, 0, 0, 0], 4, SpecialRange::Multicast),
    ([240, 0, 0, 0], 4, SpecialRange::Reserved),
];

fn classify_v4(ip: Ipv4Addr) -> Option<SpecialRange> {
    let a = u32::from(ip);
    V4_SPECIAL
        .iter()
        .find(|(net, prefix, _)| mask32(a, *prefix) == u32::from_be_bytes(*net))
        .map(|(_, _, range)| *range)
}

const fn v6(segments: [u16; 8]) -> u128 {
    let mut v: u128 = 0;
    let mut i = 0;
    while i < 8 {
        v = (v << 16) | segments[i] as u128;
        i += 1;
    }
    v
}

/// Ranges checked in order, after the embedding prefixes (mapped, NAT64, 6to4).
const V6_SPECIAL: &[(u128, u8, SpecialRange)] = &[
    (0, 128, SpecialRange::Unspecified),
    (1, 128, SpecialRange::Loopback),
    (0, 96, SpecialRange::Ipv4Compatible),
    (
        v6([0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254]),
        128,
        SpecialRange::CloudMetadata,
    ),
    (
        v6([0x64, 0xff9b, 1, 0, 0, 0, 0, 0]),
        48,
        SpecialRange::LocalNat64,
    ),
    (
        v6([0x100, 0, 0, 0, 0, 0, 0, 0]),
        64,
        SpecialRange::DiscardOnly,
    ),
    (
        v6([0xfc00, 0, 0, 0, 0, 0, 0, 0]),
        7,
        SpecialRange::UniqueLocal,
    ),
    (
        v6([0xfe80, 0, 0, 0, 0, 0, 0, 0]),
        10,
        SpecialRange::LinkLocal,
    ),
    (
        v6([0xfec0, 0, 0, 0, 0, 0, 0, 0]),
        10,
        SpecialRange::SiteLocal,
    ),
    (
        v6([0xff00, 0, 0, 0, 0, 0, 0, 0]),
        8,
        SpecialRange::Multicast,
    ),
    (
        v6([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0]),
        32,
        SpecialRange::Documentation,
    ),
    (
        v6([0x3fff, 0, 0, 0, 0, 0, 0, 0]),
        20,
        SpecialRange::Documentation,
    ),
    (v6([0x2001, 0, 0, 0, 0, 0, 0, 0]), 32, SpecialRange::Teredo),
    (
        v6([0x2001, 0, 0, 0, 0, 0, 0, 0]),
        23,
        SpecialRange::ProtocolAssignments,
    ),
];

/// The special range an address is in, if any. IPv4-mapped IPv6 is judged by its IPv4
/// address; NAT64 (64:ff9b::/96) and 6to4 (2002::/16) addresses by their embedded IPv4 address;
/// everything else in IPv6 outside global unicast 2000::/3 is special.
pub fn special_range(ip: IpAddr) -> Option<Special> {
    let plain = |range| {
        Some(Special {
            range,
            embedded: None,
        })
    };
    let a = match canonical_ip(ip) {
        IpAddr::V4(v4) => return classify_v4(v4).and_then(plain),
        IpAddr::V6(addr) => u128::from(addr),
    };
    let low32 = Ipv4Addr::from((a & 0xffff_ffff) as u32);
    // NAT64 well-known prefix: the gateway connects to the embedded IPv4 address.
    if mask128(a, 96) == v6([0x64, 0xff9b, 0, 0, 0, 0, 0, 0]) {
        return classify_v4(low32).map(|range| Special {
            range,
            embedded: Some(("NAT64", low32)),
        });
    }
    // 6to4: 2002:AABB:CCDD::/48 routes to AA.BB.CC.DD.
    if mask128(a, 16) == v6([0x2002, 0, 0, 0, 0, 0, 0, 0]) {
        let inner = Ipv4Addr::from(((a >> 80) & 0xffff_ffff) as u32);
        return classify_v4(inner).map(|range| Special {
            range,
            embedded: Some(("6to4", inner)),
        });
    }
    // SIIT IPv4-translated ::ffff:0:a.b.c.d.
    if mask128(a, 96) == v6([0, 0, 0, 0, 0xffff, 0, 0, 0]) {
        return plain(SpecialRange::Reserved);
    }
    if let Some((_, _, range)) = V6_SPECIAL
        .iter()
        .find(|(net, prefix, _)| mask128(a, *prefix) == *net)
    {
        return plain(*range);
    }
    if mask128(a, 3) != v6([0x2000, 0, 0, 0, 0, 0, 0, 0]) {
        return plain(SpecialRange::Reserved);
    }
    None
}

// ---------------------------------------------------------------------------------------------
// Decisions

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verdict {
    Allow,
    Deny,
}

impl Verdict {
    /// `"allow"` or `"deny"`, as in [`crate::NetworkEvent::verdict`].
    pub fn as_str(&self) -> &'static str {
        match self {
            Verdict::Allow => "allow",
            Verdict::Deny => "deny",
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One allow/deny answer with a short human reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub verdict: Verdict,
    pub reason: String,
}

impl Decision {
    pub fn allow(reason: impl Into<String>) -> Decision {
        Decision {
            verdict: Verdict::Allow,
            reason: reason.into(),
        }
    }

    pub fn deny(reason: impl Into<String>) -> Decision {
        Decision {
            verdict: Verdict::Deny,
            reason: reason.into(),
        }
    }

    pub fn is_allowed(&self) -> bool {
        self.verdict == Verdict::Allow
    }
}

/// Compiled allow entries (see [`NetworkPolicy::compile`]). An empty rule set denies everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EgressRules {
    entries: Vec<AllowEntry>,
}

impl EgressRules {
    pub fn new(entries: Vec<AllowEntry>) -> EgressRules {
        EgressRules { entries }
    }

    pub fn entries(&self) -> &[AllowEntry] {
        &self.entries
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// May a client ask for `host:port`? `host` as the client wrote it (no port, IPv6 may be
    /// bracketed); it is normalised first.
    pub fn check_host(&self, host: &str, port: u16) -> Decision {
        match Host::parse(host) {
            Ok(h) => self.check(&h, port),
            Err(e) => Decision::deny(e.to_string()),
        }
    }

    /// [`EgressRules::check_host`] for an already normalised host.
    pub fn check(&self, host: &Host, port: u16) -> Decision {
        let mut wrong_port = false;
        for entry in &self.entries {
            let hit = match (&entry.target, host) {
                (Target::Domain(d), Host::Name(n)) => d == n,
                (Target::Subdomains(s), Host::Name(n)) => is_strict_subdomain(n, s),
                (Target::Net(net), Host::Ip(ip)) => net.contains(*ip),
                _ => false,
            };
            if hit {
                if entry.ports.contains(port) {
                    return Decision::allow(format!("allowed by {entry}"));
                }
                wrong_port = true;
            }
        }
        if wrong_port {
            return Decision::deny(format!("port {port} not allowed for {host}"));
        }
        match host {
            // An empty allowlist is a sandbox with its network off (its proxy is there only
            // to say so): the reason names that, not a list the user never wrote.
            _ if self.entries.is_empty() => Decision::deny(NETWORK_OFF),
            Host::Ip(ip) => Decision::deny(format!("ip literal not allowed: {ip}")),
            Host::Name(_) => Decision::deny("not in allowlist"),
        }
    }

    /// May the proxy connect to `ip:port`, an address it resolved for an allowed name (or the
    /// address of an allowed IP literal)? Special ranges are refused unless an IP/CIDR entry
    /// lists the address with this port.
    pub fn check_addr(&self, ip: IpAddr, port: u16) -> Decision {
        let ip = canonical_ip(ip);
        for entry in &self.entries {
            if let Target::Net(net) = &entry.target {
                if net.contains(ip) && entry.ports.contains(port) {
                    return Decision::allow(format!("address {ip} allowed by {entry}"));
                }
            }
        }
        match special_range(ip) {
            Some(Special {
                range,
                embedded: None,
            }) => Decision::deny(format!("resolves to {} address {ip}", range.describe())),
            Some(Special {
                range,
                embedded: Some((how, v4)),
            }) => Decision::deny(format!(
                "resolves to {how} address {ip} embedding {} address {v4}",
                range.describe()
            )),
            None => Decision::allow(format!("public address {ip}")),
        }
    }
}

/// The allow entry that would let a refused request through, from what its decision recorded
/// (the host as the client wrote it, the port, and the reason [`EgressRules::check_host`] or
/// [`EgressRules::check_addr`] gave): the name or address, with `:PORT` unless the port is a
/// default one. `None` when no entry helps (a malformed request, a limit, a mismatched TLS
/// name, port 0, which no entry can name). Front ends put it after their own flag or field
/// (`--allow-net ENTRY`).
pub fn entry_to_allow(host: &str, port: u16, reason: &str) -> Option<String> {
    if port == 0 {
        return None;
    }
    let target = if reason.starts_with("not in allowlist")
        || reason == NETWORK_OFF
        || reason.starts_with("ip literal not allowed: ")
        || (reason.starts_with("port ") && reason.contains(" not allowed for "))
    {
        Host::parse(host).ok()?
    } else if let Some(rest) = reason.strip_prefix("resolves to ") {
        // "resolves to <range> address <ip>[ embedding …][; notes]": the first address.
        let (_, after) = rest.split_once(" address ")?;
        let ip = after.split([' ', ';']).next()?;
        Host::Ip(ip.parse().ok()?)
    } else {
        return None;
    };
    Some(if DEFAULT_PORTS.contains(&port) {
        target.to_string()
    } else {
        target.with_port(port)
    })
}

fn is_strict_subdomain(name: &str, suffix: &str) -> bool {
    name.len() > suffix.len() + 1
        && name.ends_with(suffix)
        && name.as_bytes().get(name.len() - suffix.len() - 1) == Some(&b'.')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(entries: &[&str]) -> EgressRules {
        NetworkPolicy {
            allow: entries.iter().map(|s| s.to_string()).collect(),
            hosts: BTreeMap::new(),
        }
        .compile()
        .unwrap()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// Each refusal's suggested entry, added to the rules, lets exactly that request through.
    #[test]
    fn the_suggested_entry_allows_what_was_refused() {
        let base = ["allowed.test", "alt.test:8443"];
        let by_name = [
            ("other.test", 443),
            ("other.test", 8080),
            ("allowed.test", 8080),
            ("203.0.113.7", 443),
            ("203.0.113.7", 9000),
            ("[2001:db8::1]", 443),
            ("2001:db8::1", 8443),
        ];
        for (host, port) in by_name {
            let d = rules(&base).check_host(host, port);
            assert!(!d.is_allowed(), "{host}:{port}");
            let entry = entry_to_allow(host, port, &d.reason)
                .unwrap_or_else(|| panic!("no entry for {host}:{port}: {}", d.reason));
            let mut more: Vec<&str> = base.to_vec();
            more.push(&entry);
            assert!(
                rules(&more).check_host(host, port).is_allowed(),
                "{host}:{port} still refused with {entry}"
            );
        }
        let by_addr = [
            ("127.0.0.1", 80),
            ("10.1.2.3", 5000),
            ("169.254.169.254", 80),
            ("::ffff:127.0.0.1", 443),
            ("fd00::1", 8443),
        ];
        for (addr, port) in by_addr {
            let d = rules(&base).check_addr(ip(addr), port);
            assert!(!d.is_allowed(), "{addr}:{port}");
            let entry = entry_to_allow("allowed.test", port, &d.reason)
                .unwrap_or_else(|| panic!("no entry for {addr}:{port}: {}", d.reason));
            let mut more: Vec<&str> = base.to_vec();
            more.push(&entry);
            assert!(
                rules(&more).check_addr(ip(addr), port).is_allowed(),
                "{addr}:{port} still refused with {entry} ({})",
                d.reason
            );
        }
        assert_eq!(
            entry_to_allow(
                "x.test",
                443,
                "resolves to reserved address 203.0.113.80; closed"
            )
            .as_deref(),
            Some("203.0.113.80")
        );
        assert_eq!(
            entry_to_allow("x.test", 443, "request head too large"),
            None
        );
        assert_eq!(
            entry_to_allow("x.test", 443, "connection limit reached (8 open)"),
            None
        );
    }

    /// Found by fuzzing (fuzz/corpus/egress_allow/crash-port-zero): a refusal for port 0 once
    /// suggested `example.com:0`, an entry `--allow-net` refuses.
    #[test]
    fn no_entry_is_suggested_for_port_zero() {
        let d = rules(&["pypi.org"]).check_host("example.com", 0);
        assert!(!d.is_allowed());
        assert_eq!(entry_to_allow("example.com", 0, &d.reason), None);
        let d = rules(&["pypi.org"]).check_addr(ip("127.0.0.1"), 0);
        assert_eq!(entry_to_allow("example.com", 0, &d.reason), None);
    }

    #[test]
    fn entries_parse_and_print_back() {
        let cases = [
            ("pypi.org", "pypi.org"),
            ("PyPI.org.", "pypi.org"),
            ("pypi.org:8443", "pypi.org:8443"),
            ("pypi.org:*", "pypi.org:*"),
            ("*.example.com", "*.example.com"),
            ("*.Example.COM:444", "*.example.com:444"),
            ("bücher.example", "xn--bcher-kva.example"),
            ("1.2.3.4", "1.2.3.4"),
            ("1.2.3.4:8080", "1.2.3.4:8080"),
            ("[::1]:8080", "[::1]:8080"),
            ("[::1]", "::1"),
            ("2001:db8::1", "2001:db8::1"),
            ("10.0.0.0/8", "10.0.0.0/8"),
            ("10.1.2.3/8", "10.0.0.0/8"),
            ("10.0.0.0/8:5000", "10.0.0.0/8:5000"),
            ("fd00::/8", "fd00::/8"),
            ("[fd00::/8]:443", "[fd00::/8]:443"),
            ("::ffff:10.0.0.0/104", "10.0.0.0/8"),
            ("[::ffff:127.0.0.2]", "127.0.0.2"),
            ("127.0.0.2:*", "127.0.0.2:*"),
            ("_srv.example.com", "_srv.example.com"),
        ];
        for (input, shown) in cases {
            let e = AllowEntry::parse(input).unwrap_or_else(|err| panic!("{input}: {err}"));
            assert_eq!(e.to_string(), shown, "{input}");
            // Printing and reparsing is stable.
            assert_eq!(AllowEntry::parse(shown).unwrap(), e, "{input}");
        }
    }

    #[test]
    fn bad_entries_are_refused_with_the_field() {
        for bad in [
            "",
            " ",
            "pypi.org ",
            "a b",
            "pypi.org:0",
            "pypi.org:65536",
            "pypi.org:http",
            "pypi.org:",
            "*",
            "*.",
            "*.*.example.com",
            "foo.*.example.com",
            "*foo.example.com",
            "a..b",
            ".a",
            "a.b..",
            "http://pypi.org",
            "user@pypi.org",
            "pypi.org/simple",
            "127.1",
            "0x7f000001",
            "2130706433",
            "0177.0.0.1",
            "10.0.0.0/33",
            "10.0.0.0/",
            "0.0.0.0/0",
            "::/0",
            "[10.0.0.0/8]",
            "[::1",
            "::1]:80",
            "1.2.3.256",
            "exa$mple.com",
            "*.127.0.0.1",
            "[fe80::1%eth0]",
            "a/b/c",
        ] {
            let err = AllowEntry::parse(bad)
                .err()
                .unwrap_or_else(|| panic!("'{bad}' accepted"));
            assert!(err.to_string().starts_with("--allow-net: "), "{err}");
        }
        let err = AllowEntry::parse("0x7f.1").unwrap_err().to_string();
        assert!(err.contains("write it as 127.0.0.1"), "{err}");
    }

    #[test]
    fn policy_validate_and_hosts() {
        let mut p = NetworkPolicy {
            allow: vec!["Allowed.Test".into()],
            hosts: BTreeMap::new(),
        };
        p.hosts.insert("Allowed.Test.".into(), ip("127.0.0.2"));
        assert!(p.is_enabled());
        p.validate().unwrap();
        assert_eq!(
            p.static_hosts().unwrap().get("allowed.test"),
            Some(&ip("127.0.0.2"))
        );
        p.hosts.insert("127.0.0.1".into(), ip("127.0.0.2"));
        assert!(p
            .validate()
            .unwrap_err()
            .to_string()
            .starts_with("network.hosts"));
        assert!(!NetworkPolicy::default().is_enabled());
        NetworkPolicy::default().validate().unwrap();
    }

    #[test]
    fn host_spellings_normalise() {
        let cases: &[(&str, Host)] = &[
            ("Example.COM", Host::Name("example.com".into())),
            ("example.com.", Host::Name("example.com".into())),
            ("ＥＸＡＭＰＬＥ．com", Host::Name("example.com".into())),
            ("example。com", Host::Name("example.com".into())),
            ("bücher.example", Host::Name("xn--bcher-kva.example".into())),
            (
                "xn--bcher-kva.example",
                Host::Name("xn--bcher-kva.example".into()),
            ),
            ("1.2.3.4.example", Host::Name("1.2.3.4.example".into())),
            ("0x7f.0.0.1.nip.io", Host::Name("0x7f.0.0.1.nip.io".into())),
            // Every IPv4 spelling of 127.0.0.1.
            ("127.0.0.1", Host::Ip(ip("127.0.0.1"))),
            ("127.0.0.1.", Host::Ip(ip("127.0.0.1"))),
            ("2130706433", Host::Ip(ip("127.0.0.1"))),
            ("0x7f000001", Host::Ip(ip("127.0.0.1"))),
            ("0X7F000001", Host::Ip(ip("127.0.0.1"))),
            ("0x7f.0.0.1", Host::Ip(ip("127.0.0.1"))),
            ("0x7f.0x0.0x0.0x1", Host::Ip(ip("127.0.0.1"))),
            ("0177.0.0.1", Host::Ip(ip("127.0.0.1"))),
            ("017700000001", Host::Ip(ip("127.0.0.1"))),
            ("127.1", Host::Ip(ip("127.0.0.1"))),
            ("127.0.1", Host::Ip(ip("127.0.0.1"))),
            ("0x7f.1", Host::Ip(ip("127.0.0.1"))),
            ("１２７.０.０.１", Host::Ip(ip("127.0.0.1"))),
            ("127。0。0。1", Host::Ip(ip("127.0.0.1"))),
            ("0", Host::Ip(ip("0.0.0.0"))),
            ("0x", Host::Ip(ip("0.0.0.0"))),
            ("169.254.43518", Host::Ip(ip("169.254.169.254"))),
            ("2852039166", Host::Ip(ip("169.254.169.254"))),
            ("0xa9fea9fe", Host::Ip(ip("169.254.169.254"))),
            ("012.0.0.1", Host::Ip(ip("10.0.0.1"))),
            // IPv6, bracketed or not, mapped IPv4 canonicalised.
            ("[::1]", Host::Ip(ip("::1"))),
            ("::1", Host::Ip(ip("::1"))),
            ("[0:0:0:0:0:0:0:1]", Host::Ip(ip("::1"))),
            ("[::ffff:127.0.0.1]", Host::Ip(ip("127.0.0.1"))),
            ("[::ffff:7f00:1]", Host::Ip(ip("127.0.0.1"))),
            ("[::FFFF:A9FE:A9FE]", Host::Ip(ip("169.254.169.254"))),
            ("[fd00:ec2::254]", Host::Ip(ip("fd00:ec2::254"))),
        ];
        for (input, want) in cases {
            assert_eq!(Host::parse(input).as_ref(), Ok(want), "{input}");
        }
    }

    #[test]
    fn malformed_hosts_are_errors() {
        for bad in [
            "",
            ".",
            "..",
            "a..b",
            ".a",
            "a.b..",
            "exa mple.com",
            "exa$mple.com",
            "a/b",
            "a@b",
            "a%2eb",
            "1.2.3.256",
            "256.1.1.1",
            "1.2.3.4.5",
            "08.0.0.1",
            "0x100000000",
            "4294967296",
            "1.16777216",
            "0xg.0.0.1",
            "[::1",
            "[1.2.3.4]",
            "[fe80::1%25eth0]",
            "1::2::3",
            "a.b.09",
            &"a".repeat(64),
            &format!("{}.com", "a.".repeat(130)),
            "-\u{0}-",
            "\u{200b}",
        ] {
            assert!(
                Host::parse(bad).is_err(),
                "'{bad}' parsed as {:?}",
                Host::parse(bad)
            );
        }
    }

    #[test]
    fn authority_splitting() {
        assert_eq!(
            parse_authority("Example.com:8443"),
            Ok((Host::Name("example.com".into()), Some(8443)))
        );
        assert_eq!(
            parse_authority("example.com"),
            Ok((Host::Name("example.com".into()), None))
        );
        assert_eq!(
            parse_authority("[::1]:443"),
            Ok((Host::Ip(ip("::1")), Some(443)))
        );
        assert_eq!(parse_authority("[::1]"), Ok((Host::Ip(ip("::1")), None)));
        assert_eq!(parse_authority("::1"), Ok((Host::Ip(ip("::1")), None)));
        assert_eq!(
            parse_authority("127.1:80"),
            Ok((Host::Ip(ip("127.0.0.1")), Some(80)))
        );
        for bad in [
            "example.com:",
            "example.com:0",
            "example.com:99999",
            "example.com:+80",
            "[::1]x",
            ":80",
            "a:b",
        ] {
            assert!(parse_authority(bad).is_err(), "{bad}");
        }
        assert_eq!(Host::Ip(ip("::1")).with_port(443), "[::1]:443");
        assert_eq!(Host::Name("a.b".into()).with_port(80), "a.b:80");
    }

    #[test]
    fn name_matching_is_on_whole_labels() {
        let r = rules(&[
            "allowed.test",
            "*.wild.test",
            "port.test:8443",
            "any.test:*",
        ]);
        let table: &[(&str, u16, bool, &str)] = &[
            ("allowed.test", 443, true, "allowed by allowed.test"),
            ("allowed.test", 80, true, ""),
            ("ALLOWED.test.", 443, true, ""),
            (
                "allowed.test",
                22,
                false,
                "port 22 not allowed for allowed.test",
            ),
            ("allowed.test.evil.test", 443, false, "not in allowlist"),
            ("evilallowed.test", 443, false, "not in allowlist"),
            ("sub.allowed.test", 443, false, "not in allowlist"),
            ("allowed.tes", 443, false, "not in allowlist"),
            ("a.wild.test", 443, true, "allowed by *.wild.test"),
            ("a.b.wild.test", 80, true, ""),
            ("wild.test", 443, false, "not in allowlist"),
            ("evilwild.test", 443, false, "not in allowlist"),
            ("wild.test.evil.test", 443, false, "not in allowlist"),
            ("port.test", 8443, true, ""),
            (
                "port.test",
                443,
                false,
                "port 443 not allowed for port.test",
            ),
            ("any.test", 1, true, ""),
            ("any.test", 65535, true, ""),
            ("evil.test", 443, false, "not in allowlist"),
            ("allowed.test@evil.test", 443, false, "invalid host name"),
            ("", 443, false, "empty host"),
        ];
        for (host, port, allowed, reason) in table {
            let d = r.check_host(host, *port);
            assert_eq!(d.is_allowed(), *allowed, "{host}:{port} -> {d:?}");
            assert!(d.reason.starts_with(reason), "{host}:{port} -> {d:?}");
        }
    }

    #[test]
    fn ip_literals_are_refused_in_every_spelling() {
        let r = rules(&["allowed.test", "127.0.0.2:*", "10.9.0.0/16:8080"]);
        for spelling in [
            "127.0.0.1",
            "2130706433",
            "0x7f000001",
            "0x7f.0.0.1",
            "0177.0.0.1",
            "127.1",
            "0x7f.1",
            "[::1]",
            "::1",
            "[::ffff:127.0.0.1]",
            "[::ffff:7f00:1]",
            "１２７.０.０.１",
            "169.254.169.254",
            "0xa9fea9fe",
            "2852039166",
            "[fd00:ec2::254]",
            "10.0.0.1",
            "012.0.0.1",
            "0",
            "0.0.0.0",
            "8.8.8.8",
            "[2606:4700::1111]",
        ] {
            let d = r.check_host(spelling, 443);
            assert!(!d.is_allowed(), "{spelling} -> {d:?}");
            assert!(
                d.reason.starts_with("ip literal not allowed"),
                "{spelling} -> {d:?}"
            );
        }
        // A listed address is allowed in any spelling, because the canonical address is checked.
        for spelling in [
            "127.0.0.2",
            "0x7f000002",
            "127.2",
            "0177.0.0.2",
            "[::ffff:127.0.0.2]",
            "2130706434",
        ] {
            assert!(r.check_host(spelling, 1234).is_allowed(), "{spelling}");
        }
        assert!(r.check_host("10.9.1.1", 8080).is_allowed());
        let d = r.check_host("10.9.1.1", 443);
        assert_eq!(d.reason, "port 443 not allowed for 10.9.1.1");
        // A network entry never allows a name.
        assert!(!r.check_host("localhost", 443).is_allowed());
    }

    #[test]
    fn special_ranges() {
        let table: &[(&str, Option<SpecialRange>)] = &[
            ("0.0.0.0", Some(SpecialRange::Unspecified)),
            ("0.1.2.3", Some(SpecialRange::ThisNetwork)),
            ("10.0.0.1", Some(SpecialRange::Private)),
            ("172.16.0.1", Some(SpecialRange::Private)),
            ("172.31.255.255", Some(SpecialRange::Private)),
            ("172.32.0.1", None),
            ("192.168.1.1", Some(SpecialRange::Private)),
            ("100.64.0.1", Some(SpecialRange::SharedAddressSpace)),
            ("100.127.255.255", Some(SpecialRange::SharedAddressSpace)),
            ("100.128.0.1", None),
            ("100.100.100.200", Some(SpecialRange::CloudMetadata)),
            ("127.0.0.1", Some(SpecialRange::Loopback)),
            ("127.255.255.254", Some(SpecialRange::Loopback)),
            ("169.254.1.1", Some(SpecialRange::LinkLocal)),
            ("169.254.169.254", Some(SpecialRange::CloudMetadata)),
            ("169.254.170.2", Some(SpecialRange::CloudMetadata)),
            ("192.0.0.8", Some(SpecialRange::ProtocolAssignments)),
            ("192.0.2.1", Some(SpecialRange::Documentation)),
            ("198.51.100.1", Some(SpecialRange::Documentation)),
            ("203.0.113.1", Some(SpecialRange::Documentation)),
            ("198.18.0.1", Some(SpecialRange::Benchmarking)),
            ("198.19.255.255", Some(SpecialRange::Benchmarking)),
            ("224.0.0.1", Some(SpecialRange::Multicast)),
            ("239.255.255.250", Some(SpecialRange::Multicast)),
            ("240.0.0.1", Some(SpecialRange::Reserved)),
            ("255.255.255.255", Some(SpecialRange::Broadcast)),
            ("8.8.8.8", None),
            ("1.1.1.1", None),
            ("151.101.0.223", None),
            ("::", Some(SpecialRange::Unspecified)),
            ("::1", Some(SpecialRange::Loopback)),
            ("::127.0.0.1", Some(SpecialRange::Ipv4Compatible)),
            ("::8.8.8.8", Some(SpecialRange::Ipv4Compatible)),
            ("::ffff:127.0.0.1", Some(SpecialRange::Loopback)),
            ("::ffff:169.254.169.254", Some(SpecialRange::CloudMetadata)),
            ("::ffff:10.0.0.1", Some(SpecialRange::Private)),
            ("::ffff:8.8.8.8", None),
            ("::ffff:0:7f00:1", Some(SpecialRange::Reserved)),
            ("fd00:ec2::254", Some(SpecialRange::CloudMetadata)),
            ("fd00::1", Some(SpecialRange::UniqueLocal)),
            ("fc00::1", Some(SpecialRange::UniqueLocal)),
            ("fe80::1", Some(SpecialRange::LinkLocal)),
            ("febf::1", Some(SpecialRange::LinkLocal)),
            ("fec0::1", Some(SpecialRange::SiteLocal)),
            ("ff02::1", Some(SpecialRange::Multicast)),
            ("100::1", Some(SpecialRange::DiscardOnly)),
            ("2001:db8::1", Some(SpecialRange::Documentation)),
            ("3fff::1", Some(SpecialRange::Documentation)),
            (
                "2001:0:4136:e378:8000:63bf:3fff:fdd2",
                Some(SpecialRange::Teredo),
            ),
            ("2001:10::1", Some(SpecialRange::ProtocolAssignments)),
            ("64:ff9b:1::1", Some(SpecialRange::LocalNat64)),
            ("64:ff9b::8.8.8.8", None),
            ("2002:808:808::1", None),
            ("4000::1", Some(SpecialRange::Reserved)),
            ("1::1", Some(SpecialRange::Reserved)),
            ("2606:4700:4700::1111", None),
            ("2a00:1450:4001::200e", None),
        ];
        for (addr, want) in table {
            assert_eq!(special_range(ip(addr)).map(|s| s.range), *want, "{addr}");
        }
        // Embedded IPv4 in NAT64 and 6to4.
        let s = special_range(ip("64:ff9b::7f00:1")).unwrap();
        assert_eq!(
            (s.range, s.embedded),
            (
                SpecialRange::Loopback,
                Some(("NAT64", "127.0.0.1".parse().unwrap()))
            )
        );
        let s = special_range(ip("64:ff9b::169.254.169.254")).unwrap();
        assert_eq!(s.range, SpecialRange::CloudMetadata);
        let s = special_range(ip("2002:a00:1::1")).unwrap();
        assert_eq!(
            (s.range, s.embedded),
            (
                SpecialRange::Private,
                Some(("6to4", "10.0.0.1".parse().unwrap()))
            )
        );
        assert_eq!(
            s.to_string(),
            "6to4 address embedding private address 10.0.0.1"
        );
        let s = special_range(ip("2002:a9fe:a9fe::")).unwrap();
        assert_eq!(s.range, SpecialRange::CloudMetadata);
    }

    #[test]
    fn resolved_addresses() {
        let r = rules(&[
            "allowed.test",
            "127.0.0.2",
            "10.1.0.0/16:*",
            "[fd00::/8]:443",
        ]);
        let table: &[(&str, u16, bool, &str)] = &[
            ("8.8.8.8", 443, true, "public address 8.8.8.8"),
            (
                "10.0.0.1",
                443,
                false,
                "resolves to private address 10.0.0.1",
            ),
            (
                "169.254.169.254",
                80,
                false,
                "resolves to cloud metadata address 169.254.169.254",
            ),
            (
                "::ffff:169.254.169.254",
                80,
                false,
                "resolves to cloud metadata address 169.254.169.254",
            ),
            (
                "fd00:ec2::254",
                80,
                false,
                "resolves to cloud metadata address fd00:ec2::254",
            ),
            (
                "127.0.0.1",
                443,
                false,
                "resolves to loopback address 127.0.0.1",
            ),
            ("::1", 443, false, "resolves to loopback address ::1"),
            (
                "::ffff:127.0.0.1",
                443,
                false,
                "resolves to loopback address 127.0.0.1",
            ),
            (
                "64:ff9b::a00:1",
                443,
                false,
                "resolves to NAT64 address 64:ff9b::a00:1 embedding private address 10.0.0.1",
            ),
            (
                "100.64.1.1",
                443,
                false,
                "resolves to carrier-grade NAT address 100.64.1.1",
            ),
            (
                "0.0.0.0",
                443,
                false,
                "resolves to unspecified address 0.0.0.0",
            ),
            (
                "fe80::1",
                443,
                false,
                "resolves to link-local address fe80::1",
            ),
            (
                "127.0.0.2",
                443,
                true,
                "address 127.0.0.2 allowed by 127.0.0.2",
            ),
            ("::ffff:127.0.0.2", 80, true, ""),
            (
                "127.0.0.2",
                8080,
                false,
                "resolves to loopback address 127.0.0.2",
            ),
            (
                "10.1.2.3",
                5432,
                true,
                "address 10.1.2.3 allowed by 10.1.0.0/16:*",
            ),
            (
                "10.2.2.3",
                5432,
                false,
                "resolves to private address 10.2.2.3",
            ),
            ("fd00::5", 443, true, ""),
            (
                "fd00::5",
                80,
                false,
                "resolves to unique-local address fd00::5",
            ),
        ];
        for (addr, port, allowed, reason) in table {
            let d = r.check_addr(ip(addr), *port);
            assert_eq!(d.is_allowed(), *allowed, "{addr}:{port} -> {d:?}");
            assert!(d.reason.starts_with(reason), "{addr}:{port} -> {d:?}");
        }
    }

    #[test]
    fn empty_rules_deny_everything() {
        let r = EgressRules::default();
        assert!(r.is_empty());
        assert!(!r.check_host("example.com", 443).is_allowed());
        assert!(!r.check_host("127.0.0.1", 443).is_allowed());
    }

    #[test]
    fn ipnet_contains() {
        let n = IpNet::new(ip("10.0.0.0"), 8).unwrap();
        assert!(n.contains(ip("10.255.0.1")));
        assert!(n.contains(ip("::ffff:10.1.1.1")));
        assert!(!n.contains(ip("11.0.0.1")));
        assert!(!n.contains(ip("::a00:1")));
        assert!(IpNet::new(ip("10.0.0.0"), 33).is_none());
        assert!(IpNet::new(ip("::"), 129).is_none());
        let n = IpNet::new(ip("2001:db8::"), 32).unwrap();
        assert!(n.contains(ip("2001:db8:ffff::1")));
        assert!(!n.contains(ip("2001:db9::1")));
    }
}
