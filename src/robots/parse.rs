//! Parsing (SPEC §3): records into source groups, source groups merged by agent (§4),
//! each merged group's rules compiled into a trie or kept for a scan, and the file laid
//! out small. One pass over the records, one method per field kind; linear in the size
//! of the file. Usage rules are grouped apart ([`super::usage_groups`]).

use std::collections::HashMap;

use super::index::{IndexedRule, RuleIndex};
use super::lexer::{self, Field, Record};
use super::pattern::{self, Pattern};
use super::usage::{self, UsageRule};
use super::usage_groups::{UsageGrouper, UsageGroups};
use super::{
    extensions, CleanParam, Extras, Group, GroupId, RobotsTxt, Rule, RuleKind, UsageSource,
    MAX_ROBOTS_BYTES,
};

impl RobotsTxt {
    /// Parses any bytes; never fails (invalid lines are skipped, SPEC §3).
    pub fn parse(body: &[u8]) -> RobotsTxt {
        let truncated = body.len() > MAX_ROBOTS_BYTES;
        let text = &body[..body.len().min(MAX_ROBOTS_BYTES)];
        // When the limit cuts a line in two, only a cut `Disallow` is kept (see the
        // module docs of `robots`).
        let cut_line = (truncated
            && !matches!(body[MAX_ROBOTS_BYTES], b'\n' | b'\r')
            && !matches!(text.last(), Some(b'\n' | b'\r')))
        .then(|| lexer::line_count(text));
        let mut parser = FileParser::new(truncated);
        for record in lexer::records(text) {
            if Some(record.line) != cut_line || record.field == Field::Disallow {
                parser.record(&record);
            }
        }
        parser.finish()
    }
}

/// The parse in progress: what has been collected, and the groups being formed.
struct FileParser {
    /// What the file says, so far.
    robots: Parsed,
    /// The source groups, before merging.
    groups: Vec<SourceGroup>,
    /// Compiled patterns, parallel to `robots.rules`; only the group indexes keep what
    /// they need of them.
    patterns: Vec<Pattern>,
    /// A `User-agent` after a group member (rule or Crawl-delay) starts a new group.
    after_rule: bool,
    /// Usage rules are grouped apart, as the attach draft groups them.
    usage_groups: UsageGrouper,
}

impl FileParser {
    /// A parse of a file (`truncated`: longer than [`MAX_ROBOTS_BYTES`]).
    fn new(truncated: bool) -> FileParser {
        FileParser {
            robots: Parsed {
                truncated,
                ..Parsed::default()
            },
            groups: Vec::new(),
            patterns: Vec::new(),
            after_rule: true,
            usage_groups: UsageGrouper::default(),
        }
    }

    /// Takes one record.
    fn record(&mut self, record: &Record<'_>) {
        match record.field {
            Field::UserAgent => self.user_agent(record),
            Field::Allow | Field::Disallow => self.rule(record),
            Field::CrawlDelay => self.crawl_delay(record),
            Field::Sitemap => self.robots.sitemap(record.value),
            Field::Host => {
                if self.robots.host.is_none() {
                    self.robots.host = extensions::parse_host(record.value);
                }
            }
            Field::CleanParam => self
                .robots
                .clean_params
                .extend(extensions::parse_clean_param(record.value, record.line)),
            Field::ContentUsage | Field::ContentSignal => self.usage_rule(record),
            Field::Unknown => {}
        }
    }

    /// `User-agent`: a new group after a member, else one more name for this one.
    fn user_agent(&mut self, record: &Record<'_>) {
        if self.after_rule {
            self.groups.push(SourceGroup {
                agents: Vec::new(),
                line: record.line,
                rules: Vec::new(),
                crawl_delay: None,
            });
            self.after_rule = false;
        }
        let agent = agent_of(record.value);
        self.usage_groups
            .user_agent(agent.as_ref().map(Agent::key), record.line);
        if let (Some(group), Some(agent)) = (self.groups.last_mut(), agent) {
            group.agents.push(agent);
        }
    }

    /// `Allow`/`Disallow`: a rule of the current group (ignored before any group; an
    /// empty value allows everything, SPEC §3).
    fn rule(&mut self, record: &Record<'_>) {
        let Some(group) = self.groups.last_mut() else {
            return;
        };
        self.after_rule = true;
        self.usage_groups.member();
        if record.value.is_empty() {
            return;
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
            group.rules.push(self.robots.rules.len() as u32);
            self.robots.rules.push(Rule {
                kind,
                pattern: compiled.text.into_boxed_str(),
                line: record.line,
                group_line: group.line,
            });
            self.patterns.push(compiled.pattern);
        }
    }

    /// `Crawl-delay`: a group member like the rules (SPEC §6), so it ends the group's
    /// user-agent list too (`User-agent: a / Crawl-delay: 2 / User-agent: *` gives `a`
    /// its own group, Yandex's example); the largest valid one counts.
    fn crawl_delay(&mut self, record: &Record<'_>) {
        let Some(group) = self.groups.last_mut() else {
            return;
        };
        self.after_rule = true;
        self.usage_groups.member();
        if let Some(delay) = extensions::parse_crawl_delay(record.value) {
            group.crawl_delay = Some(group.crawl_delay.map_or(delay, |d| d.max(delay)));
        }
    }

    /// `Content-Usage`/`Content-Signal`: a rule of the group it follows, grouped as the
    /// attach draft groups usage rules; Allow/Disallow groups ignore it, so adding a
    /// usage rule never changes what robots.txt allows.
    fn usage_rule(&mut self, record: &Record<'_>) {
        let id = self.robots.usage_rules.len() as u32;
        let Some(group_line) = self.usage_groups.rule(id) else {
            return;
        };
        let source = if record.field == Field::ContentUsage {
            UsageSource::ContentUsage
        } else {
            UsageSource::ContentSignal
        };
        self.robots.usage_rules.push(usage::parse_rule(
            source,
            record.value,
            record.line,
            group_line,
        ));
    }

    /// The file, its groups merged and laid out.
    fn finish(self) -> RobotsTxt {
        let FileParser {
            mut robots,
            groups,
            patterns,
            usage_groups,
            ..
        } = self;
        robots.merge(groups, &patterns);
        robots.lay_out(usage_groups.finish())
    }
}

/// What [`RobotsTxt::parse`] collects before the file is laid out.
#[derive(Default)]
struct Parsed {
    /// Every rule, in file order.
    rules: Vec<Rule>,
    /// The merged groups.
    groups: Vec<Group>,
    /// Named agents (lower-cased) and their group.
    named: Vec<(Box<str>, GroupId)>,
    /// The `*` group, if any.
    global: Option<GroupId>,
    /// `Sitemap` URLs, one per line.
    sitemaps: String,
    /// `Host`.
    host: Option<String>,
    /// `Clean-param` rules.
    clean_params: Vec<CleanParam>,
    /// The file was cut at the size limit.
    truncated: bool,
    /// `Content-Usage` and `Content-Signal` rules.
    usage_rules: Vec<UsageRule>,
}

/// A group while parsing, before merging.
struct SourceGroup {
    /// Its `User-agent` values.
    agents: Vec<Agent>,
    /// The line of its first `User-agent`.
    line: u32,
    /// Its rules, by id.
    rules: Vec<u32>,
    /// Its `Crawl-delay`, if it gave one.
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

impl Parsed {
    /// `Sitemap:`: collected for the whole file, one per line.
    fn sitemap(&mut self, value: &[u8]) {
        if !value.is_empty() {
            if !self.sitemaps.is_empty() {
                self.sitemaps.push('\n');
            }
            self.sitemaps.push_str(&String::from_utf8_lossy(value));
        }
    }

    /// The finished file, every part exactly as large as it is.
    fn lay_out(self, usage_groups: UsageGroups) -> RobotsTxt {
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

    /// The merged group `name` from the source groups `sources`, its rules indexed.
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
