//! Pull from a registry (the OCI distribution / Docker registry v2 API).
//!
//! A small blocking client on `ureq` rather than the `oci-client` crate: `oci-client` brings
//! 178 crates (reqwest, hyper, aws-lc-sys's C build, oci-spec, chrono) for a few GET requests,
//! and gives no hold on what matters here — resuming a blob where the file on disk ends,
//! capping every body read, progress per byte, and never following a token realm or a
//! redirect with credentials it should not get. What it speaks:
//! - auth: anonymous, HTTP Basic, and Bearer tokens from the realm a `401` names (with the
//!   registry's credentials when there are any), the Docker way;
//! - manifests: OCI and Docker schema 2 images and indexes (the host's platform is picked);
//!   a manifest asked for by digest must have it, and one asked for by tag must have the
//!   digest the registry announces (`Docker-Content-Digest`);
//! - blobs: fetched into `tmp/<hex>.partial`, resumed with `Range` after an interruption (in
//!   the same pull, and by the next pull after a killed one), verified (sha256 and size)
//!   before anything is unpacked; layers in parallel;
//! - transport: HTTPS (rustls, Mozilla's roots, `HTTPS_PROXY` honoured); plain HTTP only for
//!   registries on loopback and ones named insecure, as Docker does.

use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::net::IpAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use crate::add::{add_image, Event, Progress, Source};
use crate::auth::{CredentialStore, Credentials};
use crate::digest::Digest;
use crate::error::{ImageError, IoContext};
use crate::oci::{Descriptor, Document, Platform, MANIFEST_ACCEPT, MAX_DOCUMENT};
use crate::reference::Reference;
use crate::store::{ImageRecord, Store};
use crate::unpack::Limits;

/// Options of [`pull`].
#[derive(Debug, Clone)]
pub struct PullOptions {
    /// Registries (`host[:port]`) that may be reached over plain HTTP besides loopback ones.
    pub insecure: Vec<String>,
    pub platform: Platform,
    pub limits: Limits,
    /// Layers fetched at once.
    pub parallel: usize,
    /// Times an interrupted blob download is resumed before the pull fails.
    pub retries: u32,
    /// Explicit credentials (else the credential store's).
    pub credentials: Option<Credentials>,
}

impl Default for PullOptions {
    fn default() -> Self {
        PullOptions {
            insecure: Vec::new(),
            platform: Platform::host(),
            limits: Limits::default(),
            parallel: 3,
            retries: 5,
            credentials: None,
        }
    }
}

/// What a pull added.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Pulled {
    /// The normalised reference pulled.
    pub reference: String,
    #[serde(flatten)]
    pub record: ImageRecord,
}

/// Pulls `reference` into the store.
pub fn pull(
    store: &Store,
    reference: &str,
    opts: &PullOptions,
    progress: &dyn Progress,
) -> Result<Pulled, ImageError> {
    let r = Reference::parse(reference)?;
    let creds = opts
        .credentials
        .clone()
        .or_else(|| CredentialStore::new(store.path()).get(&r.registry));
    let client = Client::connect(&r, opts, creds)?;
    let w = store.writer()?;
    let (bytes, media_type) = client.manifest(&r.api_reference())?;
    let digest = Digest::of(&bytes);
    if let Some(d) = &r.digest {
        d.verify(&digest, || format!("manifest of {r}"))?;
    }
    let (manifest, manifest_type, index) = match Document::parse(&bytes, media_type.as_deref())? {
        Document::Manifest(_) => (bytes, media_type, None),
        Document::Index(idx) => {
            let chosen = idx.select(&opts.platform, &r.to_string())?.clone();
            let (m, mt) = client.manifest(&chosen.digest.to_string())?;
            chosen.digest.verify(&Digest::of(&m), || {
                format!("{} manifest of {r}", opts.platform)
            })?;
            (m, mt, Some((bytes, digest)))
        }
    };
    let source = RegistrySource {
        client: &client,
        retries: opts.retries,
        parallel: opts.parallel,
        progress,
    };
    let record = add_image(
        &w,
        &source,
        &manifest,
        manifest_type.as_deref(),
        index.as_ref().map(|(b, d)| (b.as_slice(), d)),
        std::slice::from_ref(&r),
        format!("pull {}", r.registry),
        &opts.limits,
        progress,
    )?;
    Ok(Pulled {
        reference: r.to_string(),
        record,
    })
}

/// Checks `creds` against `registry` (`host[:port]`, or a Docker Hub name): the token
/// exchange or Basic auth must accept them.
pub fn login(
    registry: &str,
    creds: &Credentials,
    opts: &PullOptions,
) -> Result<String, ImageError> {
    let host = Reference::parse(&format!("{registry}/x"))
        .map(|r| r.registry)
        .unwrap_or_else(|_| registry.to_string());
    let r = Reference {
        registry: host.clone(),
        repository: "library/x".into(),
        tag: None,
        digest: None,
    };
    let client = Client::connect(&r, opts, Some(creds.clone()))?;
    client.check_login()?;
    Ok(host)
}

/// Whether plain HTTP may be used for `host[:port]`.
fn may_use_http(registry: &str, insecure: &[String]) -> bool {
    if insecure.iter().any(|i| i == registry) {
        return true;
    }
    let host = if let Some(rest) = registry.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        registry
            .rsplit_once(':')
            .map(|(h, _)| h)
            .unwrap_or(registry)
    };
    host == "localhost" || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

pub(crate) struct Client {
    agent: ureq::Agent,
    /// `https://host` or `http://host`.
    base: String,
    registry: String,
    repository: String,
    creds: Option<Credentials>,
    /// The `Authorization` value in use (a Bearer token once one was obtained).
    auth: Mutex<Option<String>>,
    allow_http: bool,
}

/// One parsed `WWW-Authenticate` challenge.
#[derive(Debug, PartialEq)]
struct Challenge {
    scheme: String,
    params: Vec<(String, String)>,
}

fn parse_challenge(h: &str) -> Option<Challenge> {
    let h = h.trim();
    let (scheme, mut rest) = h.split_once(' ').unwrap_or((h, ""));
    let mut params = Vec::new();
    loop {
        rest = rest.trim_start_matches([' ', ',']);
        if rest.is_empty() {
            break;
        }
        let (k, after) = rest.split_once('=')?;
        let (v, after) = if let Some(q) = after.strip_prefix('"') {
            let mut v = String::new();
            let mut chars = q.char_indices();
            let mut end = None;
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => {
                        if let Some((_, n)) = chars.next() {
                            v.push(n);
                        }
                    }
                    '"' => {
                        end = Some(i + 1);
                        break;
                    }
                    c => v.push(c),
                }
            }
            (v, &q[end?..])
        } else {
            let e = after.find(',').unwrap_or(after.len());
            (after[..e].to_string(), &after[e..])
        };
        params.push((k.trim().to_ascii_lowercase(), v));
        rest = after;
    }
    Some(Challenge {
        scheme: scheme.to_ascii_lowercase(),
        params,
    })
}

/// The `WWW-Authenticate` parser, for the fuzz targets (`fuzz/`): the scheme and the
/// parameters, keys lowercased. Not an API.
#[doc(hidden)]
pub fn parse_challenge_for_fuzzing(h: &str) -> Option<(String, Vec<(String, String)>)> {
    parse_challenge(h).map(|c| (c.scheme, c.params))
}

impl Challenge {
    fn get(&self, k: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    }
}

fn transport(registry: &str, e: ureq::Error) -> ImageError {
    if let Some(unreachable) = unresolved(registry, &e) {
        return unreachable;
    }
    ImageError::Registry {
        registry: registry.to_string(),
        message: e.to_string(),
    }
}

/// A registry whose name does not resolve (offline, no DNS): said as such, with the ways to
/// bring an image in without reaching it — not as a protocol problem (`--insecure-registry`
/// cannot help a name that does not resolve).
fn unresolved(registry: &str, e: &ureq::Error) -> Option<ImageError> {
    let no_name = match e {
        ureq::Error::HostNotFound => true,
        // getaddrinfo's failures reach ureq as std's io::Error with this text.
        ureq::Error::Io(io) => io.to_string().contains("failed to lookup address"),
        _ => false,
    };
    no_name.then(|| ImageError::Registry {
        registry: registry.to_string(),
        message: format!(
            "cannot be reached: its host name does not resolve (no network, or no DNS: {e}). \
             Offline, bring the image in another way: `cordon image import` a \
             `docker save` / `podman save` archive or an OCI layout directory; run from an \
             unpacked root with `--image ./DIR`; or pull from a registry on loopback \
             (127.0.0.1:PORT/NAME, plain HTTP allowed)"
        ),
    })
}

impl Client {
    pub(crate) fn connect(
        r: &Reference,
        opts: &PullOptions,
        creds: Option<Credentials>,
    ) -> Result<Client, ImageError> {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .redirect_auth_headers(ureq::config::RedirectAuthHeaders::Never)
            .max_redirects(10)
            .timeout_connect(Some(Duration::from_secs(30)))
            .timeout_recv_response(Some(Duration::from_secs(60)))
            .timeout_per_read(Some(Duration::from_secs(60)))
            .user_agent(concat!("cordon/", env!("CARGO_PKG_VERSION")))
            .build()
            .new_agent();
        let host = r.api_host().to_string();
        let allow_http = may_use_http(&r.registry, &opts.insecure);
        let mut c = Client {
            agent,
            base: format!("https://{host}"),
            registry: r.registry.clone(),
            repository: r.repository.clone(),
            creds,
            auth: Mutex::new(None),
            allow_http,
        };
        // Ping `/v2/`: tells HTTPS from plain HTTP (where allowed) up front.
        match c.agent.get(format!("{}/v2/", c.base)).call() {
            Ok(_) => {}
            Err(e) if unresolved(&r.registry, &e).is_some() => return Err(transport(&r.registry, e)),
            Err(e) if allow_http => {
                let plain = format!("http://{host}");
                match c.agent.get(format!("{plain}/v2/")).call() {
                    Ok(_) => c.base = plain,
                    Err(_) => return Err(transport(&r.registry, e)),
                }
            }
            Err(e) => {
                return Err(ImageError::Registry {
                    registry: r.registry.clone(),
                    message: format!(
                        "{e} (a registry that speaks only plain HTTP must be named with --insecure-registry {})",
                        r.registry
                    ),
                })
            }
        }
        Ok(c)
    }

    fn current_auth(&self) -> Option<String> {
        self.auth.lock().ok().and_then(|a| a.clone())
    }

    /// A GET with the current authorization; on `401`, authenticates as the challenge asks
    /// and tries once more.
    fn get(
        &self,
        path: &str,
        headers: &[(&str, String)],
    ) -> Result<ureq::http::Response<ureq::Body>, ImageError> {
        let url = format!("{}{path}", self.base);
        let send = |auth: Option<String>| {
            let mut req = self.agent.get(&url);
            for (k, v) in headers {
                req = req.header(*k, v);
            }
            if let Some(a) = auth {
                req = req.header("Authorization", a);
            }
            req.call().map_err(|e| transport(&self.registry, e))
        };
        self.with_auth(send)
    }

    /// Sends with the current authorization; on `401`, authenticates as the challenge asks
    /// and sends once more (`send` takes the `Authorization` value to use).
    fn with_auth(
        &self,
        send: impl Fn(Option<String>) -> Result<ureq::http::Response<ureq::Body>, ImageError>,
    ) -> Result<ureq::http::Response<ureq::Body>, ImageError> {
        let resp = send(self.current_auth())?;
        if resp.status().as_u16() != 401 {
            return Ok(resp);
        }
        let challenge = resp
            .headers()
            .get("www-authenticate")
            .and_then(|v| v.to_str().ok())
            .and_then(parse_challenge);
        let fresh = self.authenticate(challenge)?;
        if let Ok(mut a) = self.auth.lock() {
            *a = Some(fresh.clone());
        }
        let resp = send(Some(fresh))?;
        if resp.status().as_u16() == 401 {
            return Err(ImageError::Auth {
                registry: self.registry.clone(),
                message: if self.creds.is_some() {
                    "the credentials were refused".into()
                } else {
                    "the registry wants credentials: `cordon image login` or ~/.docker/config.json"
                        .into()
                },
            });
        }
        Ok(resp)
    }

    fn authenticate(&self, c: Option<Challenge>) -> Result<String, ImageError> {
        let auth_err = |m: String| ImageError::Auth {
            registry: self.registry.clone(),
            message: m,
        };
        let Some(c) = c else {
            return Err(auth_err("401 without a WWW-Authenticate challenge".into()));
        };
        match c.scheme.as_str() {
            "basic" => self
                .creds
                .as_ref()
                .map(|cr| cr.basic_header())
                .ok_or_else(|| {
                    auth_err("the registry wants credentials: `cordon image login` or ~/.docker/config.json".into())
                }),
            "bearer" => {
                let realm = c
                    .get("realm")
                    .ok_or_else(|| auth_err("a Bearer challenge without a realm".into()))?;
                // Credentials go to the realm only over HTTPS, or plain HTTP where this
                // registry itself may be reached so.
                let plain = realm.starts_with("http://");
                if !(realm.starts_with("https://") || plain && self.allow_http) {
                    return Err(auth_err(format!(
                        "token realm {:?} is not an HTTPS URL",
                        realm.chars().take(200).collect::<String>()
                    )));
                }
                let mut req = self.agent.get(realm);
                let mut query = Vec::new();
                if let Some(s) = c.get("service") {
                    query.push(("service", s.to_string()));
                }
                query.push((
                    "scope",
                    c.get("scope")
                        .map(str::to_string)
                        .unwrap_or_else(|| format!("repository:{}:pull", self.repository)),
                ));
                for (k, v) in &query {
                    req = req.query(*k, v);
                }
                if let Some(cr) = &self.creds {
                    req = req.header("Authorization", cr.basic_header());
                }
                let resp = req.call().map_err(|e| transport(&self.registry, e))?;
                let status = resp.status().as_u16();
                if status != 200 {
                    return Err(auth_err(format!("the token service answered {status}")));
                }
                let body = read_capped(resp.into_body(), 1 << 20, &self.registry)?;
                #[derive(serde::Deserialize)]
                struct Token {
                    token: Option<String>,
                    access_token: Option<String>,
                }
                let t: Token = serde_json::from_slice(&body)
                    .map_err(|e| auth_err(format!("token answer: {e}")))?;
                let t = t
                    .token
                    .or(t.access_token)
                    .filter(|t| !t.is_empty())
                    .ok_or_else(|| auth_err("the token service gave no token".into()))?;
                Ok(format!("Bearer {t}"))
            }
            other => Err(auth_err(format!("unsupported auth scheme {other:?}"))),
        }
    }

    /// A request with a body (or none) and the current authorization; on `401`,
    /// authenticates as the challenge asks (a push asks for `pull,push`) and tries once more.
    /// `target` is a path on the registry or an absolute URL it gave (an upload's Location).
    pub(crate) fn send(
        &self,
        method: &str,
        target: &str,
        body: Body<'_>,
    ) -> Result<ureq::http::Response<ureq::Body>, ImageError> {
        let url = if target.starts_with("http://") || target.starts_with("https://") {
            // An upload location on another host would receive our credentials: refused.
            if !target.starts_with(&format!("{}/", self.base)) {
                return Err(ImageError::Registry {
                    registry: self.registry.clone(),
                    message: "the registry sent an upload to another host (refused)".into(),
                });
            }
            target.to_string()
        } else {
            format!("{}{target}", self.base)
        };
        let send = |auth: Option<String>| -> Result<ureq::http::Response<ureq::Body>, ImageError> {
            let auth_h = auth;
            let r = match (method, &body) {
                ("HEAD", _) => {
                    let mut q = self.agent.head(&url);
                    if let Some(a) = &auth_h {
                        q = q.header("Authorization", a);
                    }
                    q.call()
                }
                (m, b) => {
                    let mut q = match m {
                        "POST" => self.agent.post(&url),
                        "PATCH" => self.agent.patch(&url),
                        _ => self.agent.put(&url),
                    };
                    if let Some(a) = &auth_h {
                        q = q.header("Authorization", a);
                    }
                    match b {
                        Body::Empty => q.send_empty(),
                        Body::Bytes(bytes, ct) => q.header("Content-Type", *ct).send(*bytes),
                        Body::File(path) => {
                            let f = std::fs::File::open(path)
                                .ctx(|| format!("reading {}", path.display()))?;
                            q.header("Content-Type", "application/octet-stream").send(f)
                        }
                    }
                }
            };
            r.map_err(|e| transport(&self.registry, e))
        };
        self.with_auth(send)
    }

    pub(crate) fn repository(&self) -> &str {
        &self.repository
    }

    pub(crate) fn check_status(
        &self,
        resp: &ureq::http::Response<ureq::Body>,
        what: &str,
    ) -> Result<(), ImageError> {
        let s = resp.status().as_u16();
        if (200..300).contains(&s) {
            return Ok(());
        }
        Err(ImageError::Registry {
            registry: self.registry.clone(),
            message: match s {
                404 => format!("{what}: not found"),
                429 => {
                    format!("{what}: too many requests (rate limited; try again later, or log in)")
                }
                s => format!("{what}: HTTP {s}"),
            },
        })
    }

    /// A manifest or index by tag or digest: its bytes and media type.
    fn manifest(&self, reference: &str) -> Result<(Vec<u8>, Option<String>), ImageError> {
        let what = format!("manifest {}/{}:{reference}", self.registry, self.repository);
        let resp = self.get(
            &format!("/v2/{}/manifests/{reference}", self.repository),
            &[("Accept", MANIFEST_ACCEPT.to_string())],
        )?;
        self.check_status(&resp, &what)?;
        let header = |k: &str| {
            resp.headers()
                .get(k)
                .and_then(|v| v.to_str().ok())
                .map(|s| s.split(';').next().unwrap_or(s).trim().to_string())
        };
        let media_type = header("content-type");
        let announced = header("docker-content-digest");
        let bytes = read_capped(resp.into_body(), MAX_DOCUMENT, &self.registry)?;
        if let Some(a) = announced.and_then(|a| Digest::parse(&a).ok()) {
            a.verify(&Digest::of(&bytes), || what.clone())?;
        }
        Ok((bytes, media_type))
    }

    fn check_login(&self) -> Result<(), ImageError> {
        // `/v2/` asks for whatever auth the registry has; for token registries, a token
        // is obtained with the credentials (refused ones fail there).
        let resp = self
            .agent
            .get(format!("{}/v2/", self.base))
            .call()
            .map_err(|e| transport(&self.registry, e))?;
        if resp.status().as_u16() != 401 {
            return self.check_status(&resp, "/v2/");
        }
        let challenge = resp
            .headers()
            .get("www-authenticate")
            .and_then(|v| v.to_str().ok())
            .and_then(parse_challenge);
        let auth = self.authenticate(challenge)?;
        let resp = self
            .agent
            .get(format!("{}/v2/", self.base))
            .header("Authorization", auth)
            .call()
            .map_err(|e| transport(&self.registry, e))?;
        if resp.status().as_u16() == 401 {
            return Err(ImageError::Auth {
                registry: self.registry.clone(),
                message: "the credentials were refused".into(),
            });
        }
        self.check_status(&resp, "/v2/")
    }
}

/// What a [`Client::send`] carries.
pub(crate) enum Body<'a> {
    Empty,
    /// Bytes and their content type.
    Bytes(&'a [u8], &'a str),
    /// A file, as `application/octet-stream`.
    File(&'a Path),
}

fn read_capped(body: ureq::Body, cap: u64, registry: &str) -> Result<Vec<u8>, ImageError> {
    let mut out = Vec::new();
    body.into_reader()
        .take(cap + 1)
        .read_to_end(&mut out)
        .map_err(|e| ImageError::Registry {
            registry: registry.to_string(),
            message: format!("reading an answer: {e}"),
        })?;
    if out.len() as u64 > cap {
        return Err(ImageError::Limit(format!(
            "registry {registry} sent a document larger than {cap} bytes"
        )));
    }
    Ok(out)
}

struct RegistrySource<'a> {
    client: &'a Client,
    retries: u32,
    parallel: usize,
    progress: &'a dyn Progress,
}

impl Source for RegistrySource<'_> {
    fn parallel(&self) -> usize {
        self.parallel
    }

    fn document(&self, desc: &Descriptor) -> Result<Vec<u8>, ImageError> {
        let c = self.client;
        let resp = c.get(&format!("/v2/{}/blobs/{}", c.repository, desc.digest), &[])?;
        c.check_status(&resp, &format!("blob {}", desc.digest))?;
        read_capped(resp.into_body(), MAX_DOCUMENT, &c.registry)
    }

    fn blob(&self, desc: &Descriptor, partial: &Path) -> Result<(), ImageError> {
        let c = self.client;
        let mut attempt = 0;
        let mut started = false;
        loop {
            let mut file = OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(partial)
                .ctx(|| format!("opening {}", partial.display()))?;
            let mut have = file
                .metadata()
                .ctx(|| format!("reading {}", partial.display()))?
                .len();
            if have > desc.size {
                file.set_len(0)
                    .ctx(|| "truncating a partial download".into())?;
                have = 0;
            }
            if !started {
                self.progress.event(Event::LayerStart {
                    digest: &desc.digest,
                    size: desc.size,
                    from: have,
                });
                started = true;
            }
            if have == desc.size {
                return Ok(());
            }
            let result = self.fetch_from(desc, &mut file, have);
            match result {
                Ok(()) => return Ok(()),
                Err(Fetch::Fatal(e)) => return Err(e),
                Err(Fetch::Retry(e)) if attempt < self.retries => {
                    attempt += 1;
                    let now = std::fs::metadata(partial).map(|m| m.len()).unwrap_or(0);
                    self.progress.event(Event::Retry {
                        digest: &desc.digest,
                        from: now,
                        error: &e,
                    });
                    std::thread::sleep(Duration::from_millis(250 * u64::from(attempt)));
                }
                Err(Fetch::Retry(e)) => {
                    return Err(ImageError::Registry {
                        registry: c.registry.clone(),
                        message: format!(
                            "blob {}: {e} (gave up after {} attempts; what arrived is kept, and the next pull resumes from there)",
                            desc.digest,
                            self.retries + 1
                        ),
                    })
                }
            }
        }
    }
}

enum Fetch {
    Retry(String),
    Fatal(ImageError),
}

impl RegistrySource<'_> {
    /// One GET of the blob from byte `have` on, appended to `file`.
    fn fetch_from(
        &self,
        desc: &Descriptor,
        file: &mut std::fs::File,
        have: u64,
    ) -> Result<(), Fetch> {
        let c = self.client;
        let mut headers = Vec::new();
        if have > 0 {
            headers.push(("Range", format!("bytes={have}-")));
        }
        let resp = match c.get(
            &format!("/v2/{}/blobs/{}", c.repository, desc.digest),
            &headers,
        ) {
            Ok(r) => r,
            Err(ImageError::Registry { message, .. }) => return Err(Fetch::Retry(message)),
            Err(e) => return Err(Fetch::Fatal(e)),
        };
        let status = resp.status().as_u16();
        let from = match status {
            206 => {
                let range = resp
                    .headers()
                    .get("content-range")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("");
                if !range.starts_with(&format!("bytes {have}-")) {
                    return Err(Fetch::Fatal(ImageError::Registry {
                        registry: c.registry.clone(),
                        message: format!(
                            "blob {}: a range answer for the wrong bytes",
                            desc.digest
                        ),
                    }));
                }
                have
            }
            200 => {
                // The server ignored the range: start over.
                file.set_len(0)
                    .map_err(|e| Fetch::Fatal(ImageError::io("truncating", e)))?;
                0
            }
            416 => {
                file.set_len(0)
                    .map_err(|e| Fetch::Fatal(ImageError::io("truncating", e)))?;
                return Err(Fetch::Retry(
                    "the registry refused the range; starting over".into(),
                ));
            }
            500..=599 | 408 | 429 => return Err(Fetch::Retry(format!("HTTP {status}"))),
            _ => {
                return Err(Fetch::Fatal(
                    c.check_status(&resp, &format!("blob {}", desc.digest))
                        .err()
                        .unwrap_or_else(|| ImageError::format("blob", format!("HTTP {status}"))),
                ))
            }
        };
        let want = desc.size - from;
        let mut body = resp.into_body().into_reader().take(want + 1);
        let mut buf = vec![0u8; 128 << 10];
        let mut got = 0u64;
        loop {
            let n = match body.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) => return Err(Fetch::Retry(e.to_string())),
            };
            got += n as u64;
            if got > want {
                return Err(Fetch::Fatal(ImageError::format(
                    format!("blob {}", desc.digest),
                    format!("more than the {} bytes the manifest says", desc.size),
                )));
            }
            file.write_all(&buf[..n])
                .map_err(|e| Fetch::Fatal(ImageError::io("writing a download", e)))?;
            self.progress.event(Event::LayerBytes {
                digest: &desc.digest,
                n: n as u64,
            });
        }
        if got < want {
            return Err(Fetch::Retry(format!(
                "connection closed after {} of {} bytes",
                from + got,
                desc.size
            )));
        }
        file.sync_data()
            .map_err(|e| Fetch::Fatal(ImageError::io("writing a download", e)))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges_parse() {
        let c = parse_challenge(
            r#"Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/python:pull""#,
        )
        .expect("parse");
        assert_eq!(c.scheme, "bearer");
        assert_eq!(c.get("realm"), Some("https://auth.docker.io/token"));
        assert_eq!(c.get("scope"), Some("repository:library/python:pull"));
        let b = parse_challenge(r#"Basic realm="a \"q\" b""#).expect("basic");
        assert_eq!(
            (b.scheme.as_str(), b.get("realm")),
            ("basic", Some(r#"a "q" b"#))
        );
    }

    #[test]
    fn plain_http_only_for_loopback_and_named_registries() {
        assert!(may_use_http("127.0.0.1:5000", &[]));
        assert!(may_use_http("localhost:5000", &[]));
        assert!(may_use_http("[::1]:5000", &[]));
        assert!(may_use_http("localhost", &[]));
        assert!(!may_use_http("registry.example:5000", &[]));
        assert!(!may_use_http("10.0.0.1:5000", &[]));
        assert!(may_use_http("10.0.0.1:5000", &["10.0.0.1:5000".into()]));
        assert!(!may_use_http("docker.io", &[]));
    }
}
