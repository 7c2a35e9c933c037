//! The admin listener: how an operator asks "why was this URL blocked?" and "what is it
//! doing to origin X?" (loopback by default).
//!
//! * `GET /` — the status page (`status.html`): totals by decision, the busiest origins
//!   with their robots.txt status, crawl-delay, queue depth and next start, and a form to
//!   check a URL. `GET /status.json` is what it shows.
//! * `GET /healthz` — `ok` while the process serves; `GET /readyz` — the same, and in
//!   fleet mode the backend's state (503 once the lease lapsed); 503 from a graceful
//!   stop's start (`crate::downstream::drain`).
//! * `GET /metrics` — Prometheus text exposition of the default registry.
//! * `GET /check?url=URL[&agent=USER-AGENT][&client=IP]` — the decision a request for
//!   `URL` with that User-Agent would get, from the same [`Enforcer::decide`] the proxy
//!   calls (the store is consulted, fetching robots.txt if needed; no pacing, nothing sent
//!   to the URL itself), with the matched rule, its line and group, and the robots.txt
//!   fetch status and age.
//! * `GET /origins/{origin}` — the parsed robots.txt held for an origin (groups,
//!   sitemaps, host, clean-param, crawl-delay), its fetch state and pacing schedules.
//! * `POST /origins/{origin}/refresh` — fetch its robots.txt now (at most once per
//!   `robots.min_ttl_seconds`: 429 with `Retry-After` beyond that).
//! * `DELETE /origins/{origin}` — forget it (the next request fetches again).
//!
//! Only clients in `admin.allow_clients` (loopback by default) are served (403 otherwise;
//! `/healthz` and `/readyz` excepted); with `admin.token_file` set, `POST` and `DELETE`
//! need `Authorization: Bearer <token>` (401), and so does everything asked from beyond
//! loopback. A listener beyond loopback without a token is a configuration error, and
//! robotsgate never proxies to its own listeners: the API is never served
//! unauthenticated but to this host. See [`AdminGuard`].
//!
//! `{origin}` is `https://example.com`, `http://example.com:8080`, or the same
//! percent-encoded. Answers are JSON.

use std::net::IpAddr;
use std::sync::Arc;

use async_trait::async_trait;
use http::Response;
use pingora::apps::http_app::ServeHttp;
use pingora::protocols::http::ServerSession;
use serde_json::{json, Value};
use tokio::time::Instant;

use crate::config::OnUnavailable;
use crate::enforce::Enforcer;
use crate::enforce::OriginView;
use crate::identity::payment::{Price, Today};
use crate::origin::store::{Policy, Snapshot};
use crate::policy::target::Origin;
use crate::robots::RobotsTxt;

/// The admin API: what it serves, over which enforcer, behind which guard.
pub struct AdminApp {
    /// What the API reports on and acts through.
    pub enforcer: Arc<Enforcer>,
    /// Who may use the API.
    pub guard: AdminGuard,
    /// The last minutes, sampled in the background (the status page's charts).
    pub history: Arc<crate::ops::history::History>,
    /// The crawler's statement, from the configuration in force.
    pub statement: crate::ops::statement::Published,
}

/// Who may use the admin API, and how often an origin may be refreshed through it.
///
/// The admin listener changes what the proxy does (refresh, purge) and makes robotsgate
/// fetch from origins, so: clients outside `admin.allow_clients` get 403; with
/// `admin.token_file` set, `POST` and `DELETE` need `Authorization: Bearer <token>`
/// (401); and an origin is refreshed at most once per `robots.min_ttl_seconds` (429 with
/// `Retry-After` beyond that), so the API cannot be turned against an origin.
pub struct AdminGuard {
    /// Networks allowed to use the API.
    allow_clients: Vec<crate::config::Cidr>,
    /// SHA-256 of the token: compared in constant time, never kept in the clear.
    token: Option<[u8; 32]>,
    /// The shortest time between two refreshes of one origin's robots.txt.
    refresh_every: std::time::Duration,
    /// When each origin was last refreshed through the API.
    refreshed: std::sync::Mutex<std::collections::HashMap<Origin, Instant>>,
}

/// SHA-256 of `bytes` (tokens are compared by digest, in constant time).
fn sha256(bytes: &[u8]) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    let mut out = [0u8; 32];
    out.copy_from_slice(digest.as_ref());
    out
}

/// Most origins remembered for the refresh limit; older ones are forgotten first.
const REFRESHES_REMEMBERED: usize = 10_000;

impl AdminGuard {
    /// From `admin:`; fails when the token file cannot be read or is empty, naming it.
    pub fn new(
        config: &crate::config::AdminConfig,
        robots: &crate::config::RobotsConfig,
    ) -> anyhow::Result<AdminGuard> {
        let token = match &config.token_file {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    anyhow::anyhow!(
                        "key `robotsgate.admin.token_file`: cannot read {}: {e}",
                        path.display()
                    )
                })?;
                let token = text.trim();
                if token.len() < 16 {
                    anyhow::bail!(
                        "key `robotsgate.admin.token_file`: {} holds no token of at least 16 characters",
                        path.display()
                    );
                }
                Some(sha256(token.as_bytes()))
            }
            None => None,
        };
        Ok(AdminGuard {
            allow_clients: config.allow_clients.clone(),
            token,
            refresh_every: robots.min_ttl_seconds.duration(),
            refreshed: Default::default(),
        })
    }

    /// The answer for a request this client may not make, if it may not.
    fn refusal(
        &self,
        client: Option<IpAddr>,
        (method, path): (&str, &str),
        authorization: Option<&[u8]>,
    ) -> Option<Response<Vec<u8>>> {
        let allowed = client.is_some_and(|ip| {
            let ip = ip.to_canonical();
            self.allow_clients.iter().any(|n| n.contains(ip))
        });
        if !allowed {
            return Some(error(403, "this client is not in admin.allow_clients"));
        }
        // From beyond loopback everything needs the token; on loopback, changes do, and
        // so does the evidence (what was decided for whom).
        let local = client.is_some_and(|ip| ip.to_canonical().is_loopback());
        let needs_token =
            !local || matches!(method, "POST" | "DELETE") || path.ends_with("/evidence");
        if !needs_token {
            return None;
        }
        let Some(token) = &self.token else {
            if local {
                return None;
            }
            return Some(error(
                403,
                "the admin API is served beyond loopback only with admin.token_file",
            ));
        };
        let offered = authorization
            .and_then(|v| v.strip_prefix(b"Bearer "))
            .map(|t| sha256(t.trim_ascii()));
        let equal = offered
            .is_some_and(|o| o.iter().zip(token).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0);
        if equal {
            return None;
        }
        let mut answer = error(401, "this needs Authorization: Bearer <admin.token_file>");
        answer.headers_mut().insert(
            "WWW-Authenticate",
            http::HeaderValue::from_static("Bearer realm=\"robotsgate-admin\""),
        );
        Some(answer)
    }

    /// Takes the origin's refresh slot, or answers 429 when it was taken too recently.
    fn refresh_refusal(&self, origin: &Origin) -> Option<Response<Vec<u8>>> {
        let now = Instant::now();
        let mut map = self.refreshed.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(last) = map.get(origin) {
            let next = *last + self.refresh_every;
            if now < next {
                let retry = next.duration_since(now).as_secs_f64().ceil().max(1.0) as u64;
                let mut answer = error(
                    429,
                    format!("{origin} was refreshed less than robots.min_ttl_seconds ago; retry in {retry} s"),
                );
                if let Ok(value) = http::HeaderValue::from_str(&retry.to_string()) {
                    answer.headers_mut().insert("Retry-After", value);
                }
                return Some(answer);
            }
        }
        if map.len() >= REFRESHES_REMEMBERED {
            let every = self.refresh_every;
            map.retain(|_, at| now.duration_since(*at) < every);
        }
        map.insert(origin.clone(), now);
        None
    }
}

/// A response with `status`, `content_type` and `body`.
fn reply(status: u16, content_type: &str, body: Vec<u8>) -> Response<Vec<u8>> {
    Response::builder()
        .status(status)
        .header("Content-Type", content_type)
        .header("Content-Length", body.len())
        .header("Cache-Control", "no-store")
        .body(body)
        .unwrap_or_default()
}

/// A JSON response.
pub(super) fn json_reply(status: u16, value: &Value) -> Response<Vec<u8>> {
    let mut body = serde_json::to_vec_pretty(value).unwrap_or_default();
    body.push(b'\n');
    reply(status, "application/json", body)
}

/// A JSON error: `{"error": message}`.
pub(super) fn error(status: u16, message: impl Into<String>) -> Response<Vec<u8>> {
    json_reply(status, &json!({ "error": message.into() }))
}

#[async_trait]
impl ServeHttp for AdminApp {
    async fn response(&self, session: &mut ServerSession) -> Response<Vec<u8>> {
        let client = session
            .client_addr()
            .and_then(|a| a.as_inet())
            .map(|a| a.ip());
        let req = session.req_header();
        // Liveness answers anyone (load balancers, systemd probes); nothing else does.
        let health = matches!(req.uri.path(), "/healthz" | "/readyz");
        let authorization = req.headers.get("authorization").map(|v| v.as_bytes());
        if let (false, Some(answer)) = (
            health,
            self.guard
                .refusal(client, (req.method.as_str(), req.uri.path()), authorization),
        ) {
            return answer;
        }
        let method = req.method.as_str().to_string();
        let path = req.uri.path().to_string();
        let query = req.uri.query().unwrap_or("").to_string();
        match (method.as_str(), path.as_str()) {
            ("GET", "/healthz") => reply(200, "text/plain", b"ok\n".to_vec()),
            ("GET", "/readyz") => self.readiness(),
            ("GET", "/") => reply(
                200,
                "text/html; charset=utf-8",
                STATUS_PAGE.as_bytes().to_vec(),
            ),
            ("GET", "/status.json") => json_reply(200, &self.status().await),
            ("GET", "/metrics") => self.metrics(),
            ("GET", "/check") => self.check(&query).await,
            ("GET", "/statement.json") => self.statement(&path),
            ("GET", "/statement.html") => self.statement(&path),
            ("GET", "/statement.atom") => self.statement(&path),
            ("GET", "/fleet") => match self.enforcer.fleet_members() {
                Some(members) => json_reply(200, &members),
                None => reply(404, "text/plain", b"not in fleet mode\n".to_vec()),
            },
            (method, p) if p.starts_with("/origins/") => {
                self.origin(method, &p["/origins/".len()..]).await
            }
            _ => error(404, format!("no such endpoint: {method} {path}")),
        }
    }
}

/// The status page: one self-contained HTML file (inline CSS and script, no external
/// assets) that polls `/status.json` and calls `/check`.
const STATUS_PAGE: &str = include_str!("status.html");

/// How many origins the status page lists.
const BUSIEST: usize = 25;

impl AdminApp {
    /// What the status page shows: totals by decision and the busiest origins.
    async fn status(&self) -> Value {
        let totals: serde_json::Map<String, Value> =
            crate::telemetry::metrics::requests_by_decision()
                .into_iter()
                .map(|(label, n)| (label.to_string(), json!(n)))
                .collect();
        let origins: Vec<Value> = self
            .enforcer
            .busiest(BUSIEST)
            .into_iter()
            .map(|view| {
                let schedules = view.schedules();
                let slowest = schedules.iter().max_by_key(|s| s.delay);
                let versions = self
                    .enforcer
                    .evidence()
                    .and_then(|e| e.history(&view.origin().to_string()))
                    .map(|h| h.versions);
                json!({
                    "origin": view.origin().to_string(),
                    "versions": versions,
                    "requests": view.requests(),
                    "robots": view.snapshot().map(|s| robots_state(&view, s)),
                    "delay_seconds": slowest.map(|s| s.delay.as_secs_f64()),
                    "delay_rule": slowest.map(|s| s.rule.label()),
                    "queued": schedules.iter().map(|s| s.queued).sum::<usize>(),
                    "next_slot_in_seconds": schedules.iter().filter_map(|s| s.next_slot_in).min().map(|d| d.as_secs_f64()),
                })
            })
            .collect();
        let mut budgets = Vec::new();
        for budget in self.enforcer.budgets() {
            // The fleet's day in fleet mode; `null` amounts while its backend is down.
            let today = budget.today_so_far().await;
            let amount = |f: fn(&Today) -> &Price| today.as_ref().map(|t| f(t).to_string());
            budgets.push(json!({
                "budget": budget.name,
                "max_price": budget.max_price.to_string(),
                "daily": budget.daily.to_string(),
                "spent_today": amount(|t| &t.spent),
                "reserved": amount(|t| &t.reserved),
            }));
        }
        json!({
            "version": env!("CARGO_PKG_VERSION"),
            "totals": totals,
            "history": self.history.to_json(),
            "usage": crate::telemetry::usage::refused_share()
                .into_iter()
                .map(|(purpose, judged, refused)| json!({"purpose": purpose, "judged": judged, "refused": refused}))
                .collect::<Vec<_>>(),
            "mode": self.enforcer.mode_label(),
            "origins_held": self.enforcer.origins_held(),
            "queued": self.enforcer.queued(),
            "origins": origins,
            "charges": crate::telemetry::metrics::charges_by_identity()
                .into_iter()
                .map(|(identity, currency, units)| json!({"identity": identity, "currency": currency, "charged": units}))
                .collect::<Vec<_>>(),
            "budgets": budgets,
            "overcharges": crate::telemetry::overcharges::by_origin()
                .into_iter()
                .map(|o| json!({"origin": o.origin, "identity": o.identity, "count": o.count, "kind": o.kind}))
                .collect::<Vec<_>>(),
            "fleet": self.enforcer.fleet_view().map(|fleet| json!({
                "backend_up": fleet.up,
                "lease_valid": fleet.lease_valid,
                "on_unavailable": on_unavailable_label(fleet.on_unavailable),
            })),
        })
    }

    /// `/statement.json`, `.html`, `.atom`: the crawler's statement in force.
    fn statement(&self, path: &str) -> Response<Vec<u8>> {
        match self.statement.serve(path) {
            Some((kind, body)) => reply(200, kind, body.to_vec()),
            None => error(404, format!("no such endpoint: GET {path}")),
        }
    }

    /// `/readyz`: 200 while requests can be served as configured. In fleet mode, 503
    /// once this instance's lease has lapsed by its own clock (Redis unavailable past
    /// the lease, and with `on_unavailable: keep_owned` past the grace too): it may pace
    /// nothing then, and a load balancer should send crawlers elsewhere.
    fn readiness(&self) -> Response<Vec<u8>> {
        if crate::downstream::drain::draining() {
            let why = b"not ready: stopping; the requests in progress end first\n";
            return reply(503, "text/plain", why.to_vec());
        }
        match self.enforcer.fleet_view() {
            None => reply(200, "text/plain", b"ok\n".to_vec()),
            Some(fleet) if fleet.up && fleet.lease_valid => {
                reply(200, "text/plain", b"ok: fleet backend up\n".to_vec())
            }
            Some(fleet) if fleet.lease_valid => reply(
                200,
                "text/plain",
                format!(
                    "degraded: fleet backend unavailable ({}); owners keep pacing what they own (fleet.on_unavailable: {})\n",
                    fleet.down_reason,
                    on_unavailable_label(fleet.on_unavailable)
                )
                .into_bytes(),
            ),
            Some(fleet) => reply(
                503,
                "text/plain",
                format!(
                    "not ready: fleet lease lapsed (backend: {}) (fleet.on_unavailable: {})\n",
                    if fleet.up { "up, registering again".to_string() } else { fleet.down_reason },
                    on_unavailable_label(fleet.on_unavailable)
                )
                .into_bytes(),
            ),
        }
    }

    /// `GET /metrics`: the Prometheus text exposition.
    fn metrics(&self) -> Response<Vec<u8>> {
        crate::telemetry::metrics::update_store_gauges(self.enforcer.origins_held());
        crate::telemetry::metrics::update_pacing_gauge(self.enforcer.queued());
        let mut out = Vec::new();
        let encoder = prometheus::TextEncoder::new();
        match prometheus::Encoder::encode(&encoder, &prometheus::gather(), &mut out) {
            Ok(()) => reply(200, "text/plain; version=0.0.4", out),
            Err(e) => reply(500, "text/plain", format!("{e}\n").into_bytes()),
        }
    }

    /// `/origins/{origin}[/refresh|/robots.txt|/evidence]`: one origin's view, its
    /// robots.txt, its evidence, or a command on it.
    async fn origin(&self, method: &str, rest: &str) -> Response<Vec<u8>> {
        let (spec, action) = ["refresh", "robots.txt", "evidence"]
            .into_iter()
            .find_map(|a| Some((rest.strip_suffix(&format!("/{a}"))?, a)))
            .unwrap_or((rest, ""));
        let origin = match parse_origin(spec) {
            Ok(origin) => origin,
            Err(e) => return error(400, e.to_string()),
        };
        match (method, action) {
            ("GET", "") => {}
            ("GET", "robots.txt") => return self.held_file(&origin),
            ("GET", "evidence") => return self.origin_evidence(&origin),
            ("POST", "refresh") => {
                if let Some(answer) = self.guard.refresh_refusal(&origin) {
                    return answer;
                }
                self.enforcer.refresh(&origin).await;
            }
            ("DELETE", "") => {
                let held = self.enforcer.purge(&origin);
                return json_reply(
                    if held { 200 } else { 404 },
                    &json!({ "origin": origin.to_string(), "purged": held }),
                );
            }
            _ => return error(405, format!("{method} not allowed here")),
        }
        let Some((view, snapshot)) = self
            .enforcer
            .origin_view(&origin)
            .and_then(|view| view.snapshot().cloned().map(|snapshot| (view, snapshot)))
        else {
            return error(404, format!("{origin}: no robots.txt held"));
        };
        let mut out = json!({
            "origin": origin.to_string(),
            "robots": robots_state(&view, &snapshot),
        });
        if let Policy::Rules(file) = &snapshot.policy {
            out["parsed"] = parsed(&file.robots);
            out["sha256"] = json!(file.sha256_hex);
        }
        let mut pacing = Vec::new();
        for s in view.schedules() {
            let schedule = json!({
                "group": s.group,
                "delay_seconds": s.delay.as_secs_f64(),
                "delay_rule": s.rule.label(),
                "backoff_seconds": s.backoff.as_secs_f64(),
                "turns": s.capacity,
                "queued": s.queued,
                "next_slot_in_seconds": s.next_slot_in.map(|d| d.as_secs_f64()),
            });
            pacing.push(schedule);
        }
        out["pacing"] = json!(pacing);
        if let Some(owner) = self.enforcer.owner_of(&origin) {
            out["owner"] = json!(owner);
        }
        json_reply(200, &out)
    }
}

impl AdminApp {
    /// `GET /origins/{origin}/robots.txt`: the file held, as the origin sent it (its
    /// SHA-256 and RFC 9309 case in `X-Robots-Sha256` and `X-Robots-Case`); 404 when no
    /// file is held (the case says why).
    fn held_file(&self, origin: &Origin) -> Response<Vec<u8>> {
        let Some(snapshot) = self
            .enforcer
            .origin_view(origin)
            .and_then(|view| view.snapshot().cloned())
        else {
            return error(404, format!("{origin}: no robots.txt held"));
        };
        let case = snapshot.case(Instant::now());
        let mut answer = match &snapshot.policy {
            Policy::Rules(file) => {
                let mut answer = reply(200, "text/plain; charset=utf-8", file.body.to_vec());
                if let Ok(sha) = http::HeaderValue::from_str(&file.sha256_hex) {
                    answer.headers_mut().insert("X-Robots-Sha256", sha);
                }
                answer
            }
            _ => error(404, format!("{origin}: no file held ({case})")),
        };
        answer
            .headers_mut()
            .insert("X-Robots-Case", http::HeaderValue::from_static(case));
        answer
    }

    /// `GET /origins/{origin}/evidence`: the robots.txt versions this process decided
    /// on for the origin, each with the interval it was in force and its decisions per
    /// verdict (evidence on; the token needed whenever one is set).
    fn origin_evidence(&self, origin: &Origin) -> Response<Vec<u8>> {
        let Some(evidence) = self.enforcer.evidence() else {
            return error(404, "evidence is off (evidence.dir)");
        };
        let name = origin.to_string();
        let versions = evidence
            .history(&name)
            .map(|h| h.versions)
            .unwrap_or_default();
        json_reply(
            200,
            &json!({
                "origin": name,
                "evidence": evidence.dir().display().to_string(),
                "versions": versions,
            }),
        )
    }
}

/// `https://host[:port]`, percent-encoded or not, with or without a trailing `/`.
fn parse_origin(spec: &str) -> Result<Origin, crate::policy::target::TargetError> {
    Origin::parse(&percent_encoding::percent_decode_str(spec).decode_utf8_lossy())
}

/// Seconds since `at`, as JSON (null: never).
fn seconds_ago(at: Option<Instant>) -> Value {
    json!(at.map(|t| Instant::now().saturating_duration_since(t).as_secs_f64()))
}

/// Seconds until `at` (0 when past).
fn seconds_until(at: Instant) -> f64 {
    at.saturating_duration_since(Instant::now()).as_secs_f64()
}

/// The fetch state of one origin's robots.txt (`snapshot`: the copy a decision was
/// made from, which may be newer than the view's).
pub(super) fn robots_state(view: &OriginView, snapshot: &Snapshot) -> Value {
    let origin = view.origin();
    let (policy, why) = match &snapshot.policy {
        Policy::Rules(_) => ("rules", None),
        Policy::AllowAll { why } => ("allow_all", Some(&**why)),
        Policy::DisallowAll { why } => ("disallow_all", Some(&**why)),
    };
    json!({
        "url": origin.robots_url(),
        "policy": policy,
        "policy_reason": why,
        "last_fetch": snapshot.last_outcome,
        "age_seconds": seconds_ago(snapshot.fetched_at),
        "fresh_for_seconds": seconds_until(snapshot.fresh_until),
        "stale_copy": snapshot.is_stale_copy(),
        "unreachable_for_seconds": seconds_ago(snapshot.unreachable_since()),
        "retry_in_seconds": snapshot.retry_at().map(seconds_until),
        "consecutive_failures": snapshot.failures(),
        "history": view.history().iter().map(|f| json!({
            "seconds_ago": Instant::now().saturating_duration_since(f.at).as_secs_f64(),
            "class": f.class,
            "outcome": f.outcome,
            "duration_seconds": f.duration.as_secs_f64(),
        })).collect::<Vec<_>>(),
        "changes": view.changes().iter().map(|c| json!({
            "seconds_ago": Instant::now().saturating_duration_since(c.at).as_secs_f64(),
            "summary": c.summary,
        })).collect::<Vec<_>>(),
    })
}

/// The parsed robots.txt: what an operator reads to see why a path is judged as it is.
fn parsed(robots: &RobotsTxt) -> Value {
    let rules = robots.rules();
    json!({
        "groups": robots.groups().iter().map(|g| json!({
            "agents": g.agents,
            "lines": g.lines,
            "crawl_delay_seconds": g.crawl_delay,
            "rules": g.rules.iter().filter_map(|&i| rules.get(i as usize)).map(|r| json!({
                "rule": format!("{r}"),
                "pattern": r.pattern,
                "line": r.line,
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "sitemaps": robots.sitemaps().collect::<Vec<_>>(),
        "host": robots.host(),
        "clean_params": robots.clean_params().iter().map(|c| json!({
            "params": c.params,
            "path": c.path,
            "line": c.line,
        })).collect::<Vec<_>>(),
        "truncated": robots.truncated(),
    })
}

/// `fleet.on_unavailable` as the configuration spells it.
fn on_unavailable_label(mode: OnUnavailable) -> &'static str {
    match mode {
        OnUnavailable::Refuse => "refuse",
        OnUnavailable::KeepOwned => "keep_owned",
        OnUnavailable::Local => "local",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_in_paths() {
        assert_eq!(
            parse_origin("https://Example.com")
                .expect("plain")
                .to_string(),
            "https://example.com"
        );
        assert_eq!(
            parse_origin("https%3A%2F%2Fexample.com%3A8443%2F")
                .expect("encoded")
                .to_string(),
            "https://example.com:8443"
        );
        assert!(parse_origin("example.com").is_err());
        assert!(parse_origin("ftp://example.com").is_err());
    }
}
