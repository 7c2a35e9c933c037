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
//!
//! **Its other files:** `dictionary.rs` (an RFC 9651 Dictionary, as far as usage
//! preferences need it), `diff.rs` (what changed between two robots.txt files),
//! `extensions.rs` (Crawl-delay, Host, Clean-param), `normalize.rs` (one canonical
//! spelling for paths), `tdmrep.rs` (TDMRep's file, header and meta, with this engine's path patterns),
//! `usage.rs` (usage preferences per purpose), `usage_groups.rs` (how usage rules are
//! grouped).

mod dictionary;
mod diff;
mod extensions;
mod index;
mod lexer;
mod normalize;
mod parse;
mod pattern;
pub mod tdmrep;
mod usage;
mod usage_groups;

use serde::Serialize;

pub use diff::RulesChange;
pub use extensions::CleanParam;
pub use lexer::MAX_LINE_BYTES;
pub use normalize::{normalize_path, path_of_url, CanonicalPath};
pub use usage::{
    Preference, Purpose, Purposes, Statement, Usage, UsageRule, UsageSource, MAX_USAGE_RULES,
};
pub use usage_groups::UsageGroupId;

use index::RuleIndex;

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
    /// The trie; `None` for a group small enough to scan (see `parse::SCANNED_RULES`).
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
    /// Every rule of the file, in file order.
    rules: Box<[Rule]>,
    /// The merged groups.
    groups: Box<[Group]>,
    /// Named agents (lower-cased) and their group; few, so searched linearly.
    named: Box<[(Box<str>, GroupId)]>,
    /// The `*` group, if any.
    global: Option<GroupId>,
    /// What few files have.
    extras: Option<Box<Extras>>,
}

/// The parts of a robots.txt most files do not have.
#[derive(Debug, Default)]
struct Extras {
    /// Every `Sitemap:` URL, one per line (a value never holds a line break).
    sitemaps: Box<str>,
    /// `Host` (Yandex).
    host: Option<Box<str>>,
    /// `Clean-param` rules (Yandex).
    clean_params: Box<[CleanParam]>,
    /// The file was longer than the size limit, and cut.
    truncated: bool,
    /// `Content-Usage` and `Content-Signal` rules, when the file has any.
    usage: Option<Box<usage::UsageRules>>,
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

    /// The deciding rule of a scanned group (see `parse::SCANNED_RULES`): the longest match,
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

    /// The largest valid Crawl-delay any group of the file sets, in seconds: the
    /// longest any crawler is asked to wait between requests.
    pub fn largest_crawl_delay(&self) -> Option<f64> {
        self.groups
            .iter()
            .filter_map(|g| g.crawl_delay)
            .fold(None, |most, d| Some(most.map_or(d, |m: f64| m.max(d))))
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

    /// The rule written on `line`, if one is (the rules are kept in file order: a
    /// binary search).
    pub fn rule_on_line(&self, line: u32) -> Option<&Rule> {
        let at = self.rules.partition_point(|r| r.line < line);
        self.rules.get(at).filter(|r| r.line == line)
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
