//! Usage preferences: what a site says its content may be used for, per purpose.
//!
//! Two rules carry them inside robots.txt groups (SPEC-style notes in docs/usage-and-identity.md,
//! "Usage preferences"):
//! - IETF aipref `Content-Usage: [path] statement` (draft-ietf-aipref-attach): an
//!   optional path starting with `/` and ended by white space, then an RFC 9651
//!   Dictionary whose values are the Tokens `y`/`n` (draft-ietf-aipref-vocab);
//! - Cloudflare's `Content-Signal: search=yes, ai-train=no, ai-input=no`: no path (it
//!   applies to the whole group), values `yes`/`no`, `ai-train` standing for `train-ai`.
//!
//! Both are read with one Dictionary parser ([`super::dictionary`]): keys are
//! case-sensitive, unknown keys are ignored, the last of a repeated key wins, and a
//! statement that is not a valid Dictionary leaves every preference unknown.
//!
//! Which statement applies to a path is decided as Allow/Disallow are (RFC 9309 §2.2.2):
//! the longest matching path pattern; a rule without a path matches every path with
//! length 0. Statements of equal length combine per purpose as the vocabulary combines
//! preferences (vocab §7.1): any `n` refuses, else any `y` allows, else unknown — the
//! most restrictive wins. Costs: a linear scan of the group's usage rules (a file has a
//! handful), no allocation; files without usage rules pay nothing.

use serde::{Deserialize, Serialize};

use super::dictionary::{self, Value};
use super::pattern::{Pattern, Priority};
use super::usage_groups::{UsageGroupId, UsageGroups};

/// A use a crawler's operator declares for what it fetches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Purpose {
    /// Building a search index and showing links and short excerpts (`search`).
    #[serde(rename = "search")]
    Search,
    /// Training or fine-tuning AI models (`train-ai`; Content-Signal's `ai-train`).
    #[serde(rename = "train-ai")]
    TrainAi,
    /// Input to an AI model at answer time: RAG, grounding (`ai-input`; only
    /// Content-Signal states it).
    #[serde(rename = "ai-input")]
    AiInput,
}

impl Purpose {
    /// Every purpose.
    pub const ALL: [Purpose; 3] = [Purpose::Search, Purpose::TrainAi, Purpose::AiInput];

    /// The configuration's and the metrics' name: `search`, `train-ai`, `ai-input`.
    pub fn label(self) -> &'static str {
        match self {
            Purpose::Search => "search",
            Purpose::TrainAi => "train-ai",
            Purpose::AiInput => "ai-input",
        }
    }

    /// The purpose a label names.
    pub fn from_label(label: &str) -> Option<Purpose> {
        Purpose::ALL.into_iter().find(|p| p.label() == label)
    }
}

/// A purpose's slot in [`Purposes`] and [`Usage`].
fn index(purpose: Purpose) -> usize {
    match purpose {
        Purpose::Search => 0,
        Purpose::TrainAi => 1,
        Purpose::AiInput => 2,
    }
}

/// The key that states `purpose`'s preference in a rule of `source`.
fn key(purpose: Purpose, source: UsageSource) -> Option<&'static [u8]> {
    match (source, purpose) {
        (_, Purpose::Search) => Some(b"search"),
        (UsageSource::ContentSignal, Purpose::TrainAi) => Some(b"ai-train"),
        (_, Purpose::TrainAi) => Some(b"train-ai"),
        (UsageSource::ContentSignal, Purpose::AiInput) => Some(b"ai-input"),
        (_, Purpose::AiInput) => None,
    }
}

/// A set of purposes (small and `Copy`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Purposes(u8);

impl Purposes {
    /// No purpose: no usage check.
    pub const NONE: Purposes = Purposes(0);

    /// The set with `purpose` added.
    pub fn with(self, purpose: Purpose) -> Purposes {
        Purposes(self.0 | 1 << index(purpose))
    }

    /// Is `purpose` in the set?
    pub fn contains(self, purpose: Purpose) -> bool {
        self.0 & 1 << index(purpose) != 0
    }

    /// True for the empty set.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The purposes in the set, in [`Purpose::ALL`] order.
    pub fn iter(self) -> impl Iterator<Item = Purpose> {
        Purpose::ALL.into_iter().filter(move |p| self.contains(*p))
    }
}

impl FromIterator<Purpose> for Purposes {
    fn from_iter<I: IntoIterator<Item = Purpose>>(iter: I) -> Self {
        iter.into_iter().fold(Purposes::NONE, Purposes::with)
    }
}

/// A site's preference for one purpose.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Preference {
    /// Stated `y` (`yes`).
    Allow,
    /// Stated `n` (`no`).
    Refuse,
    /// Not stated, or not readable.
    Unknown,
}

impl Preference {
    /// `y`, `n` or `unknown`: the `X-Robots-Usage` value.
    pub fn token(self) -> &'static str {
        match self {
            Preference::Allow => "y",
            Preference::Refuse => "n",
            Preference::Unknown => "unknown",
        }
    }

    /// The metrics' `result`: `allow`, `refuse` or `unknown`.
    pub fn label(self) -> &'static str {
        match self {
            Preference::Allow => "allow",
            Preference::Refuse => "refuse",
            Preference::Unknown => "unknown",
        }
    }

    /// Combines two statements' preferences (vocab §7.1): `n` over `y` over unknown.
    fn and(self, other: Preference) -> Preference {
        match (self, other) {
            (Preference::Refuse, _) | (_, Preference::Refuse) => Preference::Refuse,
            (Preference::Allow, _) | (_, Preference::Allow) => Preference::Allow,
            _ => Preference::Unknown,
        }
    }
}

/// Where a usage preference was stated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum UsageSource {
    /// A robots.txt `Content-Usage` rule.
    #[serde(rename = "content-usage")]
    ContentUsage,
    /// A robots.txt `Content-Signal` rule.
    #[serde(rename = "content-signal")]
    ContentSignal,
    /// The origin's `Content-Usage` or `Content-Signal` response header.
    #[serde(rename = "header")]
    Header,
    /// A robots.txt with more usage rules than robotsgate reads ([`MAX_USAGE_RULES`]):
    /// a purpose refused anywhere in it is refused everywhere.
    #[serde(rename = "too-many-rules")]
    TooManyRules,
}

impl UsageSource {
    /// `content-usage`, `content-signal` or `header`.
    pub fn label(self) -> &'static str {
        match self {
            UsageSource::ContentUsage => "content-usage",
            UsageSource::ContentSignal => "content-signal",
            UsageSource::Header => "header",
            UsageSource::TooManyRules => "too-many-rules",
        }
    }

    /// The robots.txt field name, as the explanation of a verdict shows it.
    fn field(self) -> &'static str {
        match self {
            UsageSource::ContentUsage => "Content-Usage",
            UsageSource::ContentSignal => "Content-Signal",
            UsageSource::Header => "header",
            UsageSource::TooManyRules => "too many usage rules",
        }
    }
}

/// The preferences one statement sets, two bits per purpose.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Statement(u8);

impl Statement {
    /// Reads a Dictionary as `source` writes preferences; an unreadable one states
    /// nothing.
    pub fn parse(source: UsageSource, dict: &[u8]) -> Statement {
        let Some(members) = dictionary::parse(dict) else {
            return Statement::default();
        };
        let mut statement = Statement::default();
        for purpose in Purpose::ALL {
            let Some(key) = key(purpose, source) else {
                continue;
            };
            let value = members.iter().find(|(k, _)| *k == key).map(|(_, v)| *v);
            let preference = match (source, value) {
                (UsageSource::ContentSignal, Some(Value::Token(b"yes"))) => Preference::Allow,
                (UsageSource::ContentSignal, Some(Value::Token(b"no"))) => Preference::Refuse,
                (UsageSource::ContentSignal, _) => Preference::Unknown,
                (_, Some(Value::Token(b"y"))) => Preference::Allow,
                (_, Some(Value::Token(b"n"))) => Preference::Refuse,
                _ => Preference::Unknown,
            };
            statement = statement.set(purpose, preference);
        }
        statement
    }

    /// This statement with `purpose` set to `preference`.
    pub(crate) fn set(self, purpose: Purpose, preference: Preference) -> Statement {
        let bits = match preference {
            Preference::Unknown => 0,
            Preference::Allow => 1,
            Preference::Refuse => 2,
        };
        let shift = index(purpose) * 2;
        Statement(self.0 & !(3 << shift) | bits << shift)
    }

    /// The preference this statement gives `purpose`.
    pub fn preference(self, purpose: Purpose) -> Preference {
        match self.0 >> (index(purpose) * 2) & 3 {
            1 => Preference::Allow,
            2 => Preference::Refuse,
            _ => Preference::Unknown,
        }
    }
}

/// One `Content-Usage` or `Content-Signal` line of a robots.txt.
#[derive(Debug, Serialize)]
pub struct UsageRule {
    /// Which rule it is.
    pub source: UsageSource,
    /// The path pattern in canonical form; `None` applies to every path.
    pub path: Option<Box<str>>,
    /// The statement as written (the value after the path).
    pub statement: Box<str>,
    /// Its 1-based line.
    pub line: u32,
    /// The line of the first `User-agent` of the group it is a rule of (grouped as
    /// the attach draft groups usage rules: [`super::usage_groups`]).
    pub group_line: u32,
    /// What it says, per purpose.
    #[serde(skip)]
    pub(crate) prefs: Statement,
    /// The compiled `path`.
    #[serde(skip)]
    pattern: Option<Pattern>,
}

impl std::fmt::Display for UsageRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.source.field())?;
        f.write_str(": ")?;
        if let Some(path) = &self.path {
            write!(f, "{path} ")?;
        }
        write!(f, "{} (line {})", self.statement, self.line)
    }
}

/// A file with more `Content-Usage`/`Content-Signal` rules than this is not read rule by
/// rule (each request scans its group's usage rules, so their number is bounded): it
/// fails closed instead, every purpose one of its statements refuses being refused
/// everywhere ([`UsageRules::new`]).
pub const MAX_USAGE_RULES: usize = 512;

/// A statement's text is kept for explanations up to this many octets.
const MAX_STATEMENT_TEXT: usize = 256;

/// Parses a `Content-Usage` or `Content-Signal` value (already trimmed, comment
/// removed) into its rule.
pub(crate) fn parse_rule(
    source: UsageSource,
    value: &[u8],
    line: u32,
    group_line: u32,
) -> UsageRule {
    let (path, dict) = match (source, value.first()) {
        (UsageSource::ContentUsage, Some(b'/')) => {
            let end = value
                .iter()
                .position(|&b| b == b' ' || b == b'\t')
                .unwrap_or(value.len());
            let rest = &value[end..];
            let skip = rest
                .iter()
                .take_while(|&&b| b == b' ' || b == b'\t')
                .count();
            (Some(&value[..end]), &rest[skip..])
        }
        _ => (None, value),
    };
    let compiled = path.map(super::pattern::compile);
    let statement = String::from_utf8_lossy(&dict[..dict.len().min(MAX_STATEMENT_TEXT)]);
    UsageRule {
        source,
        path: compiled.as_ref().map(|c| c.text.clone().into_boxed_str()),
        statement: statement.into(),
        line,
        group_line,
        prefs: Statement::parse(source, dict),
        pattern: compiled.map(|c| c.pattern),
    }
}

/// The usage rules of a robots.txt and their groups ([`super::usage_groups`]), or,
/// for a file with more than [`MAX_USAGE_RULES`], what fails closed instead.
#[derive(Debug, Default)]
pub(crate) struct UsageRules {
    /// The rules, in file order.
    pub(crate) rules: Box<[UsageRule]>,
    /// Their groups.
    pub(crate) groups: UsageGroups,
    /// Too many rules to read: every purpose some statement of the file refuses is
    /// refused for every path and crawler (the others are unknown).
    overflow: Option<Statement>,
}

/// What applies to one path for one crawler: per purpose, the combined preference and
/// the statement that decided it.
#[derive(Clone, Copy, Debug)]
pub struct Usage<'a> {
    /// Per purpose: the preference, and the rule that stated it.
    applied: [(Preference, Option<&'a UsageRule>); 3],
    /// Decided by a file with too many usage rules to read ([`MAX_USAGE_RULES`]).
    overflow: bool,
}

impl<'a> Usage<'a> {
    /// Nothing stated: every purpose unknown.
    pub const NONE: Usage<'static> = Usage {
        applied: [(Preference::Unknown, None); 3],
        overflow: false,
    };

    /// The preference for `purpose`, and the statement it comes from (`None`: no
    /// statement applies, or none of those that apply says anything of it).
    pub fn preference(&self, purpose: Purpose) -> (Preference, Option<&'a UsageRule>) {
        self.applied[index(purpose)]
    }

    /// True when the file had more usage rules than robotsgate reads
    /// ([`MAX_USAGE_RULES`]): what it refuses anywhere is refused everywhere.
    pub fn overflowed(&self) -> bool {
        self.overflow
    }
}

impl UsageRules {
    /// The file's usage rules grouped by `groups`; past [`MAX_USAGE_RULES`], only which
    /// purposes any of them refuses is kept (`None`: the file has no usage rule).
    pub(crate) fn new(rules: Vec<UsageRule>, groups: UsageGroups) -> Option<UsageRules> {
        if rules.is_empty() {
            return None;
        }
        if rules.len() > MAX_USAGE_RULES {
            let refused = rules.iter().fold(Statement::default(), |acc, rule| {
                Purpose::ALL.into_iter().fold(acc, |acc, p| {
                    if rule.prefs.preference(p) == Preference::Refuse {
                        acc.set(p, Preference::Refuse)
                    } else {
                        acc
                    }
                })
            });
            return Some(UsageRules {
                overflow: Some(refused),
                ..UsageRules::default()
            });
        }
        Some(UsageRules {
            rules: rules.into_boxed_slice(),
            groups,
            overflow: None,
        })
    }

    /// True for a file with too many usage rules to read.
    pub(crate) fn overflowed(&self) -> bool {
        self.overflow.is_some()
    }

    /// The usage that applies to `path` (in match form) for the crawler of `group`.
    pub(crate) fn decide(&self, group: Option<UsageGroupId>, path: &[u8]) -> Usage<'_> {
        if let Some(refused) = self.overflow {
            let mut usage = Usage::NONE;
            usage.overflow = true;
            for purpose in Purpose::ALL {
                usage.applied[index(purpose)].0 = refused.preference(purpose);
            }
            return usage;
        }
        let Some(group) = group else {
            return Usage::NONE;
        };
        let ids = self.groups.rules(group);
        let mut best: Option<Priority> = None;
        let mut usage = Usage::NONE;
        for &id in ids.iter() {
            let Some(rule) = self.rules.get(id as usize) else {
                continue;
            };
            let priority = match &rule.pattern {
                None => 0,
                Some(p) if p.matches(path) => p.priority,
                Some(_) => continue,
            };
            if best.is_some_and(|b| priority < b) {
                continue;
            }
            if best.is_none_or(|b| priority > b) {
                best = Some(priority);
                usage = Usage::NONE;
            }
            for purpose in Purpose::ALL {
                let (held, from) = usage.applied[index(purpose)];
                let stated = rule.prefs.preference(purpose);
                let combined = held.and(stated);
                // The statement named is the first that stated the combined value.
                let gave = stated != Preference::Unknown && stated == combined;
                let from = if gave && (combined != held || from.is_none()) {
                    Some(rule)
                } else {
                    from
                };
                usage.applied[index(purpose)] = (combined, from);
            }
        }
        usage
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn statement(source: UsageSource, s: &str) -> [Preference; 3] {
        let st = Statement::parse(source, s.as_bytes());
        Purpose::ALL.map(|p| st.preference(p))
    }

    use Preference::{Allow as Y, Refuse as N, Unknown as U};

    #[test]
    fn content_usage_statements() {
        let cu = UsageSource::ContentUsage;
        assert_eq!(statement(cu, "train-ai=n"), [U, N, U]);
        assert_eq!(statement(cu, "train-ai=n, search=y"), [Y, N, U]);
        // ai-input exists only in Content-Signal; unknown keys are ignored.
        assert_eq!(statement(cu, "ai-input=n, tdm=n, search=n"), [N, U, U]);
        // The last of a repeated key wins; a non-Token value is unknown.
        assert_eq!(statement(cu, "train-ai=n, train-ai=y"), [U, Y, U]);
        assert_eq!(statement(cu, "train-ai=?0, search=\"n\""), [U, U, U]);
        // Values are `y`/`n` only; keys are case-sensitive (an uppercase key fails the
        // whole Dictionary).
        assert_eq!(statement(cu, "train-ai=no, search=yes"), [U, U, U]);
        assert_eq!(statement(cu, "Train-AI=n, search=n"), [U, U, U]);
    }

    #[test]
    fn content_signal_statements() {
        let cs = UsageSource::ContentSignal;
        assert_eq!(statement(cs, "search=yes, ai-train=no"), [Y, N, U]);
        assert_eq!(
            statement(cs, "search=yes,ai-train=no,use=reference"),
            [Y, N, U]
        );
        assert_eq!(statement(cs, "ai-input=no"), [U, U, N]);
        // Content-Signal speaks `yes`/`no`, and `ai-train`, not `train-ai`.
        assert_eq!(statement(cs, "search=y, train-ai=no"), [U, U, U]);
    }

    #[test]
    fn a_rule_splits_path_and_statement() {
        let rule = parse_rule(UsageSource::ContentUsage, b"/ai-ok/ train-ai=y", 5, 1);
        assert_eq!(rule.path.as_deref(), Some("/ai-ok/"));
        assert_eq!(&*rule.statement, "train-ai=y");
        assert!(rule.pattern.is_some());
        assert_eq!(
            rule.to_string(),
            "Content-Usage: /ai-ok/ train-ai=y (line 5)"
        );
        let rule = parse_rule(UsageSource::ContentUsage, b"train-ai=n", 2, 1);
        assert_eq!((rule.path, rule.pattern.is_none()), (None, true));
        // Tab separates too; a path alone states nothing.
        let rule = parse_rule(UsageSource::ContentUsage, b"/x\t\ttrain-ai=n", 1, 1);
        assert_eq!(rule.prefs.preference(Purpose::TrainAi), Preference::Refuse);
        let rule = parse_rule(UsageSource::ContentUsage, b"/x", 1, 1);
        assert_eq!(rule.prefs, Statement::default());
        // Content-Signal has no path: a leading `/` makes the Dictionary invalid.
        let rule = parse_rule(UsageSource::ContentSignal, b"/x search=no", 1, 1);
        assert_eq!((rule.path, rule.pattern.is_none()), (None, true));
        assert_eq!(rule.prefs, Statement::default());
    }

    #[test]
    fn purposes_set() {
        let set: Purposes = [Purpose::TrainAi, Purpose::AiInput].into_iter().collect();
        assert!(set.contains(Purpose::TrainAi) && !set.contains(Purpose::Search));
        assert_eq!(
            set.iter().collect::<Vec<_>>(),
            [Purpose::TrainAi, Purpose::AiInput]
        );
        assert!(Purposes::NONE.is_empty());
        assert_eq!(Purpose::from_label("ai-input"), Some(Purpose::AiInput));
        assert_eq!(Purpose::from_label("ai-train"), None);
    }

    fn applied(robots: &str, agent: &str, path: &str) -> Vec<(Preference, Option<u32>)> {
        let robots = crate::robots::RobotsTxt::parse(robots.as_bytes());
        let group = robots.usage_group_for(&[agent]);
        let usage = robots.usage(group, &crate::robots::CanonicalPath::from_url(path));
        Purpose::ALL
            .iter()
            .map(|&p| {
                let (pref, rule) = usage.preference(p);
                (pref, rule.map(|r| r.line))
            })
            .collect()
    }

    /// draft-ietf-aipref-attach, §3 example.
    const ATTACH: &str = "User-Agent: *\nAllow: /\nDisallow: /never/\nContent-Usage: / train-ai=n\nContent-Usage: /ai-ok/ train-ai=y\n\nUser-Agent: ExampleBot\nAllow: /\nContent-Usage: / train-ai=y\n";

    #[test]
    fn the_attach_drafts_example() {
        assert_eq!(applied(ATTACH, "Other", "/test")[1], (N, Some(4)));
        assert_eq!(applied(ATTACH, "Other", "/ai-ok/test")[1], (Y, Some(5)));
        assert_eq!(applied(ATTACH, "ExampleBot", "/test")[1], (Y, Some(9)));
        assert_eq!(applied(ATTACH, "Other", "/test")[0], (U, None));
    }

    #[test]
    fn longest_path_then_most_restrictive() {
        let robots = "User-agent: *\nContent-Usage: /a train-ai=y, search=y\nContent-Usage: /a train-ai=n\nContent-Usage: /a/b search=n\nContent-Signal: ai-train=yes, ai-input=no\n";
        // Two statements at /a: n beats y for train-ai; search only stated by one.
        assert_eq!(
            applied(robots, "x", "/a/x"),
            [(Y, Some(2)), (N, Some(3)), (U, None)]
        );
        // The longer path alone applies, even where it says nothing of a purpose.
        assert_eq!(
            applied(robots, "x", "/a/b/c"),
            [(N, Some(4)), (U, None), (U, None)]
        );
        // No path matches: the group-wide Content-Signal (length 0).
        assert_eq!(
            applied(robots, "x", "/z"),
            [(U, None), (Y, Some(5)), (N, Some(5))]
        );
        // Patterns as for Allow/Disallow: `*` and `$`, escapes normalised.
        let robots =
            "User-agent: *\nContent-Usage: /*.pdf$ train-ai=n\nContent-Usage: /%7Ea train-ai=y\n";
        assert_eq!(applied(robots, "x", "/d/x.pdf")[1], (N, Some(2)));
        assert_eq!(applied(robots, "x", "/d/x.pdf?q")[1], (U, None));
        assert_eq!(applied(robots, "x", "/~a/b")[1], (Y, Some(3)));
    }

    #[test]
    fn groups_merge_and_end_as_the_attach_draft_says() {
        // Cloudflare's managed block, then the site's own `*` group: merged (RFC 9309).
        let robots = "User-agent: *\nContent-Signal: search=yes,ai-train=no\nAllow: /\n\nUser-agent: GPTBot\nDisallow: /\n\nUser-agent: *\nDisallow: /admin\n";
        assert_eq!(
            applied(robots, "x", "/page"),
            [(Y, Some(2)), (N, Some(2)), (U, None)]
        );
        assert_eq!(
            applied(robots, "GPTBot", "/page"),
            [(U, None), (U, None), (U, None)]
        );
        // A usage rule ends a group's user-agent list for usage (the draft's ABNF), but
        // not for Allow/Disallow: `a` keeps the Disallow below, and `b` does not get
        // `a`'s usage rule.
        let robots = "User-agent: a\nContent-Usage: train-ai=n\nUser-agent: b\nDisallow: /x\n";
        assert_eq!(applied(robots, "a", "/p")[1], (N, Some(2)));
        assert_eq!(applied(robots, "b", "/p")[1], (U, None));
        let parsed = crate::robots::RobotsTxt::parse(robots.as_bytes());
        assert!(!parsed.check(&["a"], "/x").allowed);
        assert_eq!(parsed.usage_rules()[0].group_line, 1);
        // A crawler with a group of its own never inherits the `*` group's statements.
        let robots = "User-agent: *\nContent-Usage: train-ai=n\nUser-agent: a\nDisallow: /x\n";
        assert_eq!(applied(robots, "a", "/p")[1], (U, None));
        assert_eq!(applied(robots, "zzz", "/p")[1], (N, Some(2)));
        // Before any group: ignored; no group for the crawler: nothing applies.
        assert_eq!(
            applied("Content-Usage: train-ai=n\n", "a", "/p")[1],
            (U, None)
        );
        // Comments end the value.
        assert_eq!(
            applied(
                "User-agent: *\nContent-Usage: train-ai=n # no AI\n",
                "a",
                "/p"
            )[1],
            (N, Some(2))
        );
    }

    #[test]
    fn too_many_usage_rules_fail_closed() {
        // Past the bound, what any statement refuses is refused everywhere, for every
        // crawler; what none refuses is unknown.
        let mut many =
            String::from("User-agent: other\nContent-Usage: / train-ai=n\nUser-agent: *\n");
        for _ in 0..=MAX_USAGE_RULES {
            many.push_str("Content-Usage: /x search=y\n");
        }
        assert_eq!(applied(&many, "a", "/y"), [(U, None), (N, None), (U, None)]);
        let parsed = crate::robots::RobotsTxt::parse(many.as_bytes());
        assert!(parsed.usage_rules().is_empty());
        assert!(parsed.usage_overflowed());
        let usage = parsed.usage(None, &crate::robots::CanonicalPath::from_url("/z"));
        assert!(usage.overflowed());
        assert_eq!(usage.preference(Purpose::TrainAi).0, N);
    }
}
