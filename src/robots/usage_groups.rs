//! How usage rules are grouped: as draft-ietf-aipref-attach's ABNF groups them, apart
//! from how Allow/Disallow are grouped.
//!
//! RFC 9309 groups `Allow`/`Disallow` (and robotsgate its Crawl-delay) with the usage
//! lines ignored: adding a `Content-Usage` or `Content-Signal` line never changes what a
//! robots.txt allows (the property tests hold this). The attach draft makes a usage
//! line a rule of the group it follows, so for usage rules any group member
//! (`Allow`, `Disallow`, `Crawl-delay`, `Content-Usage`, `Content-Signal`) ends a
//! user-agent list, and a crawler obeys only its most specific group: the group that
//! names one of its tokens (the first token that has one), else the `*` group, chosen
//! exactly as RFC 9309 chooses (SPEC §4, docs/SPEC.md "Usage preferences").
//!
//! `User-agent: a / Content-Usage: train-ai=n / User-agent: b / Disallow: /x` is one
//! Allow/Disallow group for `a` and `b` (both disallowed `/x`), but two usage groups: `a`
//! has the statement, `b` has none. Groups naming the same agent are merged, as
//! RFC 9309 merges them.
//!
//! Costs: one small record per `User-agent` line while parsing a file that has usage
//! rules (files without any keep nothing); choosing a group is a few case-insensitive
//! compares, as for [`super::RobotsTxt::group_for`].

use std::collections::HashMap;

/// A usage group of one robots.txt, as [`super::RobotsTxt::usage_group_for`] picks it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct UsageGroupId(u32);

impl UsageGroupId {
    /// Its position among the file's usage groups.
    fn index(self) -> usize {
        self.0 as usize
    }
}

/// One source group while parsing: its user-agent names (lower-cased; `*` for the
/// global group), its first line, and the usage rules it holds.
struct GroupSource {
    /// Its user-agent names.
    names: Vec<String>,
    /// Its first line.
    line: u32,
    /// Its usage rules, by id.
    rules: Vec<u32>,
}

/// Collects the usage groups while a file is parsed, record by record.
#[derive(Default)]
pub(crate) struct UsageGrouper {
    /// The source groups so far.
    sources: Vec<GroupSource>,
    /// A member came after the last `User-agent` line: the next one starts a group.
    after_member: bool,
}

impl UsageGrouper {
    /// A `User-agent` line naming `name` (lower-cased, `*` for global; `None` for a
    /// value that names no agent, which still takes part in grouping).
    pub(crate) fn user_agent(&mut self, name: Option<String>, line: u32) {
        if self.after_member || self.sources.is_empty() {
            self.sources.push(GroupSource {
                names: Vec::new(),
                line,
                rules: Vec::new(),
            });
            self.after_member = false;
        }
        if let (Some(source), Some(name)) = (self.sources.last_mut(), name) {
            source.names.push(name);
        }
    }

    /// An `Allow`, `Disallow` or `Crawl-delay` line inside a group: it ends the
    /// group's user-agent list.
    pub(crate) fn member(&mut self) {
        self.after_member = !self.sources.is_empty();
    }

    /// Usage rule `id` on the current group: the line of that group's first
    /// `User-agent`, or `None` before any group (the rule is then ignored).
    pub(crate) fn rule(&mut self, id: u32) -> Option<u32> {
        let source = self.sources.last_mut()?;
        source.rules.push(id);
        self.after_member = true;
        Some(source.line)
    }

    /// The merged groups: one per set of source groups naming the same agents.
    pub(crate) fn finish(self) -> UsageGroups {
        let mut by_name: Vec<(String, Vec<usize>)> = Vec::new();
        let mut position: HashMap<String, usize> = HashMap::new();
        for (s, source) in self.sources.iter().enumerate() {
            for name in &source.names {
                let slot = *position.entry(name.clone()).or_insert_with(|| {
                    by_name.push((name.clone(), Vec::new()));
                    by_name.len() - 1
                });
                let sources = &mut by_name[slot].1;
                if sources.last() != Some(&s) {
                    sources.push(s);
                }
            }
        }
        let mut groups = UsageGroups::default();
        let mut merged: HashMap<Vec<usize>, UsageGroupId> = HashMap::new();
        for (name, sources) in by_name {
            let id = *merged.entry(sources.clone()).or_insert_with(|| {
                groups.rules.push(
                    sources
                        .iter()
                        .flat_map(|&s| self.sources[s].rules.iter().copied())
                        .collect(),
                );
                groups.lines.push(self.sources[sources[0]].line);
                UsageGroupId(groups.rules.len() as u32 - 1)
            });
            if name == "*" {
                groups.global = Some(id);
            } else {
                groups.named.push((name.into_boxed_str(), id));
            }
        }
        groups
    }
}

/// The usage groups of a file: which group each agent name selects, and each group's
/// rules.
#[derive(Debug, Default)]
pub(crate) struct UsageGroups {
    /// Named agents (lower-cased) and their group.
    named: Vec<(Box<str>, UsageGroupId)>,
    /// The `*` group, if any.
    global: Option<UsageGroupId>,
    /// Per group: ids into the file's usage rules, in file order.
    rules: Vec<Box<[u32]>>,
    /// Per group: the line of its first source group's first `User-agent`.
    lines: Vec<u32>,
}

impl UsageGroups {
    /// The group for an ordered token list (SPEC §4): the first token that names a
    /// group, else `*`, else none.
    pub(crate) fn group_for<S: AsRef<str>>(&self, tokens: &[S]) -> Option<UsageGroupId> {
        super::pick_group(&self.named, self.global, tokens)
    }

    /// The rule ids of `group`.
    pub(crate) fn rules(&self, group: UsageGroupId) -> &[u32] {
        self.rules.get(group.index()).map_or(&[], |r| r)
    }

    /// The line `group` starts on.
    pub(crate) fn line(&self, group: UsageGroupId) -> Option<u32> {
        self.lines.get(group.index()).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grouped(records: &[(&str, Option<&str>)]) -> UsageGroups {
        let mut g = UsageGrouper::default();
        let mut next = 0;
        for (line, (field, value)) in records.iter().enumerate() {
            let line = line as u32 + 1;
            match *field {
                "ua" => g.user_agent(value.map(str::to_string), line),
                "rule" => {
                    g.member();
                }
                _ => {
                    g.rule(next);
                    next += 1;
                }
            }
        }
        g.finish()
    }

    #[test]
    fn a_usage_line_ends_a_user_agent_list() {
        // ua a / usage 0 / ua b / Disallow: b has a group of its own, without it.
        let g = grouped(&[
            ("ua", Some("a")),
            ("usage", None),
            ("ua", Some("b")),
            ("rule", None),
        ]);
        let a = g.group_for(&["a"]).expect("a");
        let b = g.group_for(&["b"]).expect("b");
        assert_ne!(a, b);
        assert_eq!(g.rules(a), [0]);
        assert!(g.rules(b).is_empty());
        assert_eq!((g.line(a), g.line(b)), (Some(1), Some(3)));
        assert_eq!(g.group_for(&["c"]), None);
    }

    #[test]
    fn groups_naming_one_agent_merge() {
        let g = grouped(&[
            ("ua", Some("*")),
            ("usage", None),
            ("ua", Some("a")),
            ("usage", None),
            ("ua", Some("*")),
            ("usage", None),
        ]);
        let global = g.group_for(&["zzz"]).expect("*");
        assert_eq!(g.rules(global), [0, 2]);
        assert_eq!(g.rules(g.group_for(&["x", "A"]).expect("a")), [1]);
    }

    #[test]
    fn rules_before_any_group_are_ignored() {
        let mut g = UsageGrouper::default();
        assert_eq!(g.rule(0), None);
        g.member();
        g.user_agent(Some("a".into()), 3);
        assert_eq!(g.rule(1), Some(3));
    }
}
