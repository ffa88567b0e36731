//! Policy text from users and API clients: `--allow-net` entries and the host names the proxy
//! checks against them, profile TOML, and the WebAssembly header check of a one-shot run.

use std::net::IpAddr;
use std::path::Path;

use cordon_policy::network::{entry_to_allow, AllowEntry, EgressRules, Host, NetworkPolicy};
use cordon_policy::profile::Profile;

/// `ENTRY\nHOST\nPORT`: an allow entry and a request for `HOST:PORT`.
/// - A rejected entry never matches anything: the policy that lists it refuses to compile
///   (it is never dropped silently, leaving a list that allows something else).
/// - A parsed entry prints as an entry that parses back to itself.
/// - A host normalises to a fixed point, and an IPv4-mapped IPv6 address is judged as its
///   IPv4 address.
/// - A request is allowed only by an entry that names it, and the entry `entry_to_allow`
///   suggests for a refusal does let that request through.
pub fn egress_allow(data: &[u8]) {
    let (entry, rest) = crate::split2(data);
    let (host, port) = crate::split2(rest);
    let entry = crate::text(entry);
    let host = crate::text(host);
    let port = crate::text(port).trim().parse::<u16>().unwrap_or(443);

    let policy = NetworkPolicy {
        allow: vec![entry.clone()],
        ..NetworkPolicy::default()
    };
    let rules = match AllowEntry::parse(&entry) {
        Err(_) => {
            assert!(policy.compile().is_err(), "{entry:?} refused yet compiled");
            EgressRules::new(vec![])
        }
        Ok(parsed) => {
            let shown = parsed.to_string();
            let again = AllowEntry::parse(&shown)
                .unwrap_or_else(|e| panic!("{entry:?} prints as {shown:?}, which fails: {e}"));
            assert_eq!(again, parsed, "{entry:?} -> {shown:?}");
            let rules = policy.compile().expect("a parsed entry compiles");
            assert_eq!(rules.entries(), &[parsed]);
            rules
        }
    };

    let decision = rules.check_host(&host, port);
    if let Ok(h) = Host::parse(&host) {
        let shown = h.to_string();
        assert_eq!(
            Host::parse(&shown).as_ref(),
            Ok(&h),
            "{host:?} normalises to {shown:?}, which is not a fixed point"
        );
        if let Host::Ip(IpAddr::V4(v4)) = &h {
            let via_v6 = rules.check_host(&format!("[{}]", v4.to_ipv6_mapped()), port);
            assert_eq!(
                via_v6.is_allowed(),
                decision.is_allowed(),
                "{host:?} via ::ffff:"
            );
        }
        // The decision is the same for the normalised form: what the proxy logs is what it
        // judged.
        assert_eq!(
            rules.check(&h, port).is_allowed(),
            decision.is_allowed(),
            "{host:?}"
        );
    } else {
        assert!(
            !decision.is_allowed(),
            "{host:?} does not parse yet is allowed"
        );
    }
    if rules.is_empty() {
        assert!(!decision.is_allowed(), "an empty list allowed {host:?}");
    }
    if !decision.is_allowed() {
        if let Some(suggested) = entry_to_allow(&host, port, &decision.reason) {
            let e = AllowEntry::parse(&suggested).unwrap_or_else(|err| {
                panic!("suggested {suggested:?} for {host:?}:{port} does not parse: {err}")
            });
            let fixed = EgressRules::new(vec![e]);
            assert!(
                fixed.check_host(&host, port).is_allowed(),
                "suggested {suggested:?} does not allow {host:?}:{port}"
            );
        }
    }
}

/// A profile file (`--profile FILE`, `cordon serve --templates`): parsed without panicking;
/// what parses validates, and survives the JSON trip to the runtime (`cordon-wasm` and the
/// engine's child get the profile as JSON) unchanged.
pub fn profile_toml(data: &[u8]) {
    let text = crate::text(data);
    let Ok(p) = Profile::from_toml(&text, Path::new("fuzz.toml")) else {
        return;
    };
    p.validate().expect("a parsed profile validates");
    let json = serde_json::to_string(&p).expect("a profile serialises");
    let back: Profile = serde_json::from_str(&json)
        .unwrap_or_else(|e| panic!("a parsed profile does not read back from JSON: {e}: {json}"));
    assert_eq!(back, p, "the profile changed on its way through JSON");
}

/// A one-shot run's module from an API client (base64): accepted exactly when it decodes to
/// at least the eight header bytes and starts with `\0asm`, and then its size is reported.
pub fn wasm_header(data: &[u8]) {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(data);
    let ok = data.len() >= 8 && data.starts_with(b"\0asm");
    match cordon_service::oneshot::check_wasm(&b64, false) {
        Ok(n) => {
            assert!(ok, "accepted a module without a wasm header");
            assert_eq!(n, data.len());
        }
        Err(_) => assert!(!ok, "refused a module with a wasm header"),
    }
    assert!(cordon_service::oneshot::check_wasm(&b64, true).is_err());
    // The text as a client may send it (not base64, or with whitespace around it).
    let _ = cordon_service::oneshot::check_wasm(&crate::text(data), false);
}
