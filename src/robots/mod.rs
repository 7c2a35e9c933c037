//! The robots.txt engine: any bytes in, a compiled and immutable [`RobotsTxt`] out, and
//! from it a [`Verdict`] per crawler and URL that says why.
//!
//! Pure by design — no I/O, no clocks, no proxy types — so it can be tested and fuzzed
//! alone and shared read-only behind an `Arc` by every request. The rules it implements,
//! and every choice where the sources disagree, are in SPEC.md §3–§6.
//!
//! Pipeline and costs:
//! 1. [`lexer`] splits the bytes into records (one pass, no allocation).
//! 2. [`RobotsTxt::parse`] groups the records (SPEC §3), merges groups naming the same
//!    agent (SPEC §4), and compiles each rule's pattern once ([`pattern`]) and each
//!    merged group into a trie ([`index`]). Parsing is linear in the file size.
//! 3. [`RobotsTxt::group_for`] picks the group for an ordered token list (a few
//!    case-insensitive compares); [`RobotsTxt::decide`] walks the group's trie along a
//!    [`CanonicalPath`] — linear in the path, independent of the number of prefix rules,
//!    and without allocating.
//!
//! Size limit: `parse` reads only the first [`MAX_ROBOTS_BYTES`] octets (SPEC §2), so a
//! fetcher may hand it the whole body or stop reading just past the limit. When the limit
//! cuts a line in two, the cut line is kept only if it is a `Disallow`: a cut pattern is a
//! prefix of the real one and covers every URL the real one did, while a cut `Allow` or
//! `User-agent` would grant more than the site wrote.
//!
//! ```
//! use robotsgate::robots::RobotsTxt;
//!
//! let robots = RobotsTxt::parse(b"User-agent: *\nDisallow: /private\nAllow: /private/ok\n");
//! assert!(!robots.check(&["ExampleBot"], "http://example.com/private/x").allowed);
//! assert!(robots.check(&["ExampleBot"], "http://example.com/private/ok").allowed);
//! // Longest match wins, and the URL's escapes are normalised like the rule's.
//! assert!(!robots.check(&["ExampleBot"], "/%70rivate").allowed);
//! ```

mod dictionary;
mod diff;
mod extensions;
mod index;
mod lexer;
mod normalize;
mod pattern;
mod usage;
mod usage_groups;

use std::collections::HashMap;

use serde::Serialize;

pub use diff::RulesChange;
pub use extensions::CleanParam;
pub use lexer::MAX_LINE_BYTES;
pub use normalize::{normalize_path, path_of_url, CanonicalPath};
pub use usage::{
    Preference, Purpose, Purposes, Statement, Usage, UsageRule, UsageSource, MAX_USAGE_RULES,
};
pub use usage_groups::UsageGroupId;

use index::{IndexedRule, RuleIndex};
use lexer::Field;
use pattern::Pattern;

/// Octets of a robots.txt that are parsed; the rest is ignored (SPEC §2: 500 KiB).
pub const MAX_ROBOTS_BYTES: usize = 512_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
/// Whether a rule allows or disallows.
pub enum RuleKind {
    /// `Allow:`
    Allow,
    /// `Disallow:`
    Disallow,
}

/// One `Allow`/`Disallow` line, as the explanation of a verdict shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Rule {
    /// Allow or Disallow.
    pub kind: RuleKind,
    /// The pattern in canonical form (SPEC §5): what was compared.
    pub pattern: Box<str>,
    /// 1-based line number in the robots.txt.
    pub line: u32,
    /// Line of the first `User-agent` record of the group the rule belongs to.
    pub group_line: u32,
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.kind {
            RuleKind::Allow => "Allow",
            RuleKind::Disallow => "Disallow",
        };
        write!(f, "{kind}: {} (line {})", self.pattern, self.line)
    }
}

/// A merged group (SPEC §4): every group of the file naming the same agent(s).
#[derive(Debug, Serialize)]
pub struct Group {
    /// The agent names that select this group, as written (`*` for the global group).
    pub agents: Box<[Box<str>]>,
    /// Line of the first `User-agent` record of each source group.
    pub lines: Box<[u32]>,
    /// Largest valid Crawl-delay of the source groups, in seconds.
    pub crawl_delay: Option<f64>,
    /// Ids of the rules (see [`RobotsTxt::rules`]), in file order.
    pub rules: Box<[u32]>,
    #[serde(skip)]
    /// The trie; `None` for a group small enough to scan (see [`SCANNED_RULES`]).
    index: Option<Box<RuleIndex>>,
}

/// Identifies a merged group of one [`RobotsTxt`]; crawlers with the same `GroupId` share
/// one pacing schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct GroupId(u32);

impl GroupId {
    /// The group's position in [`RobotsTxt::groups`].
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Why a verdict came out as it did.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Reason<'a> {
    /// This rule was the longest match.
    Rule(&'a Rule),
    /// The crawler has a group, but none of its rules matches the URL.
    NoMatchingRule,
    /// No group names the crawler and there is no `*` group: no restrictions.
    NoGroup,
    /// `/robots.txt` itself is always allowed.
    RobotsTxtItself,
}

#[derive(Clone, Copy, Debug, PartialEq)]
/// Whether a path may be fetched, and why.
pub struct Verdict<'a> {
    /// May it be fetched?
    pub allowed: bool,
    /// Why.
    pub reason: Reason<'a>,
}

impl Verdict<'_> {
    /// The deciding rule, when a rule decided.
    pub fn rule(&self) -> Option<&Rule> {
        match self.reason {
            Reason::Rule(rule) => Some(rule),
            _ => None,
        }
    }
}

impl std::fmt::Display for Verdict<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.reason {
            Reason::Rule(rule) => write!(f, "{rule}, group at line {}", rule.group_line),
            Reason::NoMatchingRule => f.write_str("no matching rule"),
            Reason::NoGroup => f.write_str("no group for this agent"),
            Reason::RobotsTxtItself => f.write_str("/robots.txt is always allowed"),
        }
    }
}

/// A parsed, compiled robots.txt. Immutable; `Send + Sync`; share it behind an `Arc`.
///
/// Held for every origin a crawl has visited, by the hundred thousand, so it is laid
/// out to be small: boxed slices rather than vectors (no capacity word, no growth
/// slack), and what few files have (sitemaps, Yandex extensions, truncation) behind one
/// optional box.
#[derive(Debug, Default)]
pub struct RobotsTxt {
    rules: Box<[Rule]>,
    groups: Box<[Group]>,
    /// Named agents (lower-cased) and their group; few, so searched linearly.
    named: Box<[(Box<str>, GroupId)]>,
    global: Option<GroupId>,
    extras: Option<Box<Extras>>,
}

/// The parts of a robots.txt most files do not have.
#[derive(Debug, Default)]
struct Extras {
    /// Every `Sitemap:` URL, one per line (a value never holds a line break).
    sitemaps: Box<str>,
    host: Option<Box<str>>,
    clean_params: Box<[CleanParam]>,
    truncated: bool,
    /// `Content-Usage` and `Content-Signal` rules, when the file has any.
    usage: Option<Box<usage::UsageRules>>,
}

/// What [`RobotsTxt::parse`] collects before the file is laid out.
#[derive(Default)]
struct Parsed {
    rules: Vec<Rule>,
    groups: Vec<Group>,
    named: Vec<(Box<str>, GroupId)>,
    global: Option<GroupId>,
    sitemaps: String,
    host: Option<String>,
    clean_params: Vec<CleanParam>,
    truncated: bool,
    usage_rules: Vec<UsageRule>,
}

/// A group while parsing, before merging.
struct SourceGroup {
    agents: Vec<Agent>,
    line: u32,
    rules: Vec<u32>,
    crawl_delay: Option<f64>,
}

/// What one `User-agent` value names.
enum Agent {
    /// `*`: every crawler without a group of its own.
    Global,
    /// One product token, as written.
    Named(String),
}

impl Agent {
    /// The name groups are merged and chosen by: lower-cased, `*` for global.
    fn key(&self) -> String {
        match self {
            Agent::Global => "*".to_string(),
            Agent::Named(name) => name.to_ascii_lowercase(),
        }
    }
}

/// The agent a `User-agent` value names (SPEC §4): `*` (alone or followed by white
/// space) is global; otherwise only the leading `[A-Za-z_-]` octets count.
fn agent_of(value: &[u8]) -> Option<Agent> {
    if value.first() == Some(&b'*') && value.get(1).is_none_or(|b| b.is_ascii_whitespace()) {
        return Some(Agent::Global);
    }
    let len = value
        .iter()
        .take_while(|b| b.is_ascii_alphabetic() || matches!(b, b'-' | b'_'))
        .count();
    // ASCII by construction.
    (len > 0).then(|| Agent::Named(String::from_utf8_lossy(&value[..len]).into_owned()))
}

/// The group an ordered token list selects (SPEC §4) among `named` (lower-cased agent
/// names) and `global`: the first token naming a group, else `global`. Shared by the
/// Allow/Disallow groups and the usage groups, which differ only in how they are formed.
pub(crate) fn pick_group<I: Copy, S: AsRef<str>>(
    named: &[(Box<str>, I)],
    global: Option<I>,
    tokens: &[S],
) -> Option<I> {
    tokens
        .iter()
        .find_map(|token| {
            let token = token.as_ref();
            named
                .iter()
                .find(|(name, _)| name.eq_ignore_ascii_case(token))
                .map(|&(_, id)| id)
        })
        .or(global)
}

/// Groups of at most this many rules, none with a wildcard, are decided by a scan of
/// their rules' canonical text instead of a trie: for a handful of prefixes a scan is as
/// fast, and the trie (some hundreds of octets) would be most of what a small file costs
/// to hold — for every origin held.
const SCANNED_RULES: usize = 8;

/// Can `rules` be scanned: few, and each one's canonical text exactly what the trie
/// would compare (its literal octets, then `$` when anchored), its length its priority?
/// (`%2A` and `%24` are literal octets in the compiled pattern but escapes in the text:
/// such a group keeps its trie.)
fn scannable(rules: &[IndexedRule<'_>], all: &[Rule]) -> bool {
    rules.len() <= SCANNED_RULES
        && rules.iter().all(|r| {
            let text = all[r.id as usize].pattern.as_bytes();
            let literal = if r.pattern.anchored {
                text.strip_suffix(b"$")
            } else {
                Some(text)
            };
            !r.pattern.has_wildcard()
                && literal == Some(r.pattern.prefix())
                && r.pattern.priority as usize == text.len()
        })
}

/// Google's reference parser also allows the directory of an allowed `index.htm(l)`:
/// `Allow: /d/index.html` implies `Allow: /d/$`.
fn index_html_directory(value: &[u8]) -> Option<Vec<u8>> {
    let slash = memchr::memrchr(b'/', value)?;
    value[slash..].starts_with(b"/index.htm").then(|| {
        let mut dir = value[..=slash].to_vec();
        dir.push(b'$');
        dir
    })
}

impl RobotsTxt {
    /// Parses any bytes; never fails (invalid lines are skipped, SPEC §3).
    pub fn parse(body: &[u8]) -> RobotsTxt {
        let truncated = body.len() > MAX_ROBOTS_BYTES;
        let text = &body[..body.len().min(MAX_ROBOTS_BYTES)];
        let cut_line = (truncated
            && !matches!(body[MAX_ROBOTS_BYTES], b'\n' | b'\r')
            && !matches!(text.last(), Some(b'\n' | b'\r')))
        .then(|| lexer::line_count(text));

        let mut robots = Parsed {
            truncated,
            ..Parsed::default()
        };
        let mut groups: Vec<SourceGroup> = Vec::new();
        // Compiled patterns, parallel to `robots.rules`; only the group indexes keep what
        // they need of them.
        let mut patterns: Vec<Pattern> = Vec::new();
        // A `User-agent` after a group member (rule or Crawl-delay) starts a new group.
        let mut after_rule = true;
        // Usage rules are grouped apart, as the attach draft groups them.
        let mut usage_groups = usage_groups::UsageGrouper::default();

        for record in lexer::records(text) {
            if Some(record.line) == cut_line && record.field != Field::Disallow {
                continue;
            }
            match record.field {
                Field::UserAgent => {
                    if after_rule {
                        groups.push(SourceGroup {
                            agents: Vec::new(),
                            line: record.line,
                            rules: Vec::new(),
                            crawl_delay: None,
                        });
                        after_rule = false;
                    }
                    let agent = agent_of(record.value);
                    usage_groups.user_agent(agent.as_ref().map(Agent::key), record.line);
                    if let (Some(group), Some(agent)) = (groups.last_mut(), agent) {
                        group.agents.push(agent);
                    }
                }
                Field::Allow | Field::Disallow => {
                    let Some(group) = groups.last_mut() else {
                        continue; // rules before any user-agent are ignored
                    };
                    after_rule = true;
                    usage_groups.member();
                    if record.value.is_empty() {
                        continue; // `Disallow:` allows everything (SPEC §3)
                    }
                    let kind = if record.field == Field::Allow {
                        RuleKind::Allow
                    } else {
                        RuleKind::Disallow
                    };
                    let extra = (kind == RuleKind::Allow)
                        .then(|| index_html_directory(record.value))
                        .flatten();
                    for value in std::iter::once(record.value).chain(extra.as_deref()) {
                        let compiled = pattern::compile(value);
                        group.rules.push(robots.rules.len() as u32);
                        robots.rules.push(Rule {
                            kind,
                            pattern: compiled.text.into_boxed_str(),
                            line: record.line,
                            group_line: group.line,
                        });
                        patterns.push(compiled.pattern);
                    }
                }
                Field::CrawlDelay => {
                    // A group member like the rules (SPEC §6), so it ends the group's
                    // user-agent list too: `User-agent: a / Crawl-delay: 2 / User-agent: *`
                    // gives `a` its own group (Yandex's example).
                    let Some(group) = groups.last_mut() else {
                        continue;
                    };
                    after_rule = true;
                    usage_groups.member();
                    if let Some(delay) = extensions::parse_crawl_delay(record.value) {
                        group.crawl_delay = Some(group.crawl_delay.map_or(delay, |d| d.max(delay)));
                    }
                }
                Field::Sitemap => {
                    if !record.value.is_empty() {
                        if !robots.sitemaps.is_empty() {
                            robots.sitemaps.push('\n');
                        }
                        robots
                            .sitemaps
                            .push_str(&String::from_utf8_lossy(record.value));
                    }
                }
                Field::Host => {
                    if robots.host.is_none() {
                        robots.host = extensions::parse_host(record.value);
                    }
                }
                Field::CleanParam => {
                    robots
                        .clean_params
                        .extend(extensions::parse_clean_param(record.value, record.line));
                }
                Field::ContentUsage | Field::ContentSignal => {
                    // A rule of the group it follows, grouped as the attach draft groups
                    // usage rules (`usage_groups`); Allow/Disallow groups ignore it, so
                    // adding a usage rule never changes what robots.txt allows.
                    let id = robots.usage_rules.len() as u32;
                    let Some(group_line) = usage_groups.rule(id) else {
                        continue;
                    };
                    let source = if record.field == Field::ContentUsage {
                        UsageSource::ContentUsage
                    } else {
                        UsageSource::ContentSignal
                    };
                    robots.usage_rules.push(usage::parse_rule(
                        source,
                        record.value,
                        record.line,
                        group_line,
                    ));
                }
                Field::Unknown => {}
            }
        }
        robots.merge(groups, &patterns);
        robots.lay_out(usage_groups.finish())
    }
}

impl Parsed {
    /// The finished file, every part exactly as large as it is.
    fn lay_out(self, usage_groups: usage_groups::UsageGroups) -> RobotsTxt {
        let Parsed {
            rules,
            groups,
            named,
            global,
            sitemaps,
            host,
            clean_params,
            truncated,
            usage_rules,
        } = self;
        let usage = usage::UsageRules::new(usage_rules, usage_groups).map(Box::new);
        let rare = !sitemaps.is_empty()
            || host.is_some()
            || !clean_params.is_empty()
            || truncated
            || usage.is_some();
        let extras = rare.then(|| {
            Box::new(Extras {
                sitemaps: sitemaps.into_boxed_str(),
                host: host.map(String::into_boxed_str),
                clean_params: clean_params.into_boxed_slice(),
                truncated,
                usage,
            })
        });
        RobotsTxt {
            rules: rules.into_boxed_slice(),
            groups: groups.into_boxed_slice(),
            named: named.into_boxed_slice(),
            global,
            extras,
        }
    }

    /// Merges source groups by agent name (SPEC §4) and compiles each merged group.
    fn merge(&mut self, groups: Vec<SourceGroup>, patterns: &[Pattern]) {
        // Agent name (lower-cased; "*" for global) → the source groups naming it.
        let mut by_name: Vec<(String, String, Vec<usize>)> = Vec::new();
        let mut position: HashMap<String, usize> = HashMap::new();
        for (g, group) in groups.iter().enumerate() {
            for agent in &group.agents {
                let written = match agent {
                    Agent::Global => "*".to_string(),
                    Agent::Named(name) => name.clone(),
                };
                let key = written.to_ascii_lowercase();
                let slot = *position.entry(key.clone()).or_insert_with(|| {
                    by_name.push((key, written, Vec::new()));
                    by_name.len() - 1
                });
                let sources = &mut by_name[slot].2;
                if sources.last() != Some(&g) {
                    sources.push(g);
                }
            }
        }
        // Names with the same source groups share one merged group (`e` and `f` in
        // `User-agent: e` / `User-agent: f` / rules).
        let mut merged: HashMap<Vec<usize>, GroupId> = HashMap::new();
        for (key, written, sources) in by_name {
            let id = match merged.get(&sources) {
                Some(&id) => {
                    let group = &mut self.groups[id.index()];
                    let mut agents = std::mem::take(&mut group.agents).into_vec();
                    agents.push(written.into_boxed_str());
                    group.agents = agents.into_boxed_slice();
                    id
                }
                None => {
                    let id = GroupId(self.groups.len() as u32);
                    self.groups
                        .push(self.build_group(written, &sources, &groups, patterns));
                    merged.insert(sources, id);
                    id
                }
            };
            if key == "*" {
                self.global = Some(id);
            } else {
                self.named.push((key.into_boxed_str(), id));
            }
        }
    }

    fn build_group(
        &self,
        name: String,
        sources: &[usize],
        groups: &[SourceGroup],
        patterns: &[Pattern],
    ) -> Group {
        let rules: Vec<u32> = sources
            .iter()
            .flat_map(|&g| groups[g].rules.iter().copied())
            .collect();
        let indexed: Vec<IndexedRule<'_>> = rules
            .iter()
            .map(|&id| IndexedRule {
                id,
                allow: self.rules[id as usize].kind == RuleKind::Allow,
                pattern: &patterns[id as usize],
            })
            .collect();
        Group {
            agents: Box::new([name.into_boxed_str()]),
            lines: sources.iter().map(|&g| groups[g].line).collect(),
            crawl_delay: sources
                .iter()
                .filter_map(|&g| groups[g].crawl_delay)
                .reduce(f64::max),
            index: (!scannable(&indexed, &self.rules))
                .then(|| Box::new(RuleIndex::build(&indexed))),
            rules: rules.into_boxed_slice(),
        }
    }
}

impl RobotsTxt {
    /// The group for a crawler given its product tokens, most specific first (SPEC §4):
    /// the first token that names a group picks it; otherwise the `*` group; otherwise
    /// `None` (no restrictions). Tokens compare case-insensitively and whole.
    pub fn group_for<S: AsRef<str>>(&self, tokens: &[S]) -> Option<GroupId> {
        pick_group(&self.named, self.global, tokens)
    }

    /// The verdict for a path in canonical form under the given group.
    pub fn decide(&self, group: Option<GroupId>, path: &CanonicalPath<'_>) -> Verdict<'_> {
        if path.is_robots_txt() {
            return Verdict {
                allowed: true,
                reason: Reason::RobotsTxtItself,
            };
        }
        let Some(group) = group.and_then(|id| self.groups.get(id.index())) else {
            return Verdict {
                allowed: true,
                reason: Reason::NoGroup,
            };
        };
        let path = normalize::match_form(path.as_str());
        let decided = match &group.index {
            Some(index) => index.decide(&path).map(|id| &self.rules[id as usize]),
            None => self.scan(group, &path),
        };
        match decided {
            Some(rule) => Verdict {
                allowed: rule.kind == RuleKind::Allow,
                reason: Reason::Rule(rule),
            },
            None => Verdict {
                allowed: true,
                reason: Reason::NoMatchingRule,
            },
        }
    }

    /// The deciding rule of a scanned group (see [`SCANNED_RULES`]): the longest match,
    /// `Allow` on a tie, the first in file order among equals — as the trie decides.
    fn scan(&self, group: &Group, path: &[u8]) -> Option<&Rule> {
        let mut best: Option<(u32, &Rule)> = None;
        for rule in group
            .rules
            .iter()
            .filter_map(|&id| self.rules.get(id as usize))
        {
            let text = rule.pattern.as_bytes();
            let matched = match text.strip_suffix(b"$") {
                Some(exact) => path == exact,
                None => path.starts_with(text),
            };
            // The trie's rank: priority (here the text's length) first, then `Allow`.
            let rank = ((text.len() as u32 + 1) << 1) | u32::from(rule.kind == RuleKind::Allow);
            if matched && best.is_none_or(|(r, _)| rank > r) {
                best = Some((rank, rule));
            }
        }
        best.map(|(_, rule)| rule)
    }

    /// Convenience: the verdict for a URL (absolute or origin-form) and token list.
    pub fn check<S: AsRef<str>>(&self, tokens: &[S], url: &str) -> Verdict<'_> {
        self.decide(self.group_for(tokens), &CanonicalPath::from_url(url))
    }

    /// Crawl-delay in seconds for a group, if the file sets a valid one.
    pub fn crawl_delay(&self, group: Option<GroupId>) -> Option<f64> {
        group.and_then(|id| self.groups.get(id.index())?.crawl_delay)
    }

    /// The group with this id.
    pub fn group(&self, id: GroupId) -> Option<&Group> {
        self.groups.get(id.index())
    }

    /// Every group, merged by agent, in file order.
    pub fn groups(&self) -> &[Group] {
        &self.groups
    }

    /// Every `Allow`/`Disallow` rule, in file order; [`Group::rules`] index into it.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Every `Sitemap:` URL, in file order.
    pub fn sitemaps(&self) -> impl Iterator<Item = &str> {
        self.extras
            .as_ref()
            .map_or("", |e| &e.sitemaps)
            .split('\n')
            .filter(|s| !s.is_empty())
    }

    /// The first valid Yandex `Host` value.
    pub fn host(&self) -> Option<&str> {
        self.extras.as_ref()?.host.as_deref()
    }

    /// Every valid Yandex `Clean-param:`, in file order.
    pub fn clean_params(&self) -> &[CleanParam] {
        self.extras.as_ref().map_or(&[], |e| &e.clean_params)
    }

    /// The usage group for a crawler's ordered tokens: chosen as [`RobotsTxt::group_for`]
    /// chooses, among the groups usage rules form (`usage_groups`: the attach draft's
    /// grouping, not RFC 9309's).
    pub fn usage_group_for<S: AsRef<str>>(&self, tokens: &[S]) -> Option<UsageGroupId> {
        self.extras
            .as_ref()?
            .usage
            .as_ref()?
            .groups
            .group_for(tokens)
    }

    /// The line of the first `User-agent` of a usage group.
    pub fn usage_group_line(&self, group: UsageGroupId) -> Option<u32> {
        self.extras.as_ref()?.usage.as_ref()?.groups.line(group)
    }

    /// The usage preferences that apply to a path (canonical) for the crawler of usage
    /// `group` ([`RobotsTxt::usage_group_for`]): only meaningful for a path the crawler
    /// may fetch.
    pub fn usage(&self, group: Option<UsageGroupId>, path: &CanonicalPath<'_>) -> Usage<'_> {
        match self.extras.as_ref().and_then(|e| e.usage.as_ref()) {
            Some(rules) => rules.decide(group, &normalize::match_form(path.as_str())),
            None => Usage::NONE,
        }
    }

    /// True when the file has more usage rules than robotsgate reads one by one: every
    /// purpose any of them refuses is then refused everywhere ([`Usage::overflowed`]).
    pub fn usage_overflowed(&self) -> bool {
        self.extras
            .as_ref()
            .and_then(|e| e.usage.as_ref())
            .is_some_and(|u| u.overflowed())
    }

    /// Every `Content-Usage` and `Content-Signal` rule, in file order.
    pub fn usage_rules(&self) -> &[UsageRule] {
        self.extras
            .as_ref()
            .and_then(|e| e.usage.as_ref())
            .map_or(&[], |u| &u.rules)
    }

    /// True when the input was longer than [`MAX_ROBOTS_BYTES`] and its tail was ignored.
    pub fn truncated(&self) -> bool {
        self.extras.as_ref().is_some_and(|e| e.truncated)
    }
}

#[cfg(test)]
mod tests;
