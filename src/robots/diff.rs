//! What changed between two robots.txt files, in the terms that decide requests: which
//! groups exist (by their agent names), which `Allow`/`Disallow` patterns each has, and
//! its Crawl-delay. Line numbers, comments, order, spelling of agent names (case) and
//! other records (sitemaps, host) are not rules: a file that changes only those is not a
//! change.
//!
//! Cost: O(rules · log rules) per comparison, run once per refetch, never per request.

use std::collections::{BTreeMap, BTreeSet};

use super::{RobotsTxt, RuleKind};

/// The rules of one file: per group (agent names, lower-case, sorted), its rules
/// (`Allow: /x`, `Disallow: /y`) and Crawl-delay.
type Rules = BTreeMap<String, (BTreeSet<String>, Option<f64>)>;

/// The rules of `robots`, per group (none: an empty file's).
fn rules_of(robots: Option<&RobotsTxt>) -> Rules {
    let Some(robots) = robots else {
        return Rules::new();
    };
    robots
        .groups()
        .iter()
        .map(|group| {
            let mut agents: Vec<String> = group
                .agents
                .iter()
                .map(|a| a.to_ascii_lowercase())
                .collect();
            agents.sort();
            agents.dedup();
            let rules = group
                .rules
                .iter()
                .filter_map(|&id| robots.rules().get(id as usize))
                .map(|rule| match rule.kind {
                    RuleKind::Allow => format!("Allow: {}", rule.pattern),
                    RuleKind::Disallow => format!("Disallow: {}", rule.pattern),
                })
                .collect();
            (agents.join(", "), (rules, group.crawl_delay))
        })
        .collect()
}

/// A change of the effective rules (`None` before or after: no robots.txt, allow all).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RulesChange {
    /// Groups (their agent names) that appeared.
    pub groups_added: Vec<String>,
    /// Groups that went.
    pub groups_removed: Vec<String>,
    /// Rules that appeared, as `group: Disallow: /x`.
    pub rules_added: Vec<String>,
    /// Rules that went.
    pub rules_removed: Vec<String>,
    /// Crawl-delays that changed: group, before, after.
    pub crawl_delays: Vec<(String, Option<f64>, Option<f64>)>,
}

impl RulesChange {
    /// The change from `before` to `after`, if their rules differ.
    pub fn between(before: Option<&RobotsTxt>, after: Option<&RobotsTxt>) -> Option<RulesChange> {
        let (old, new) = (rules_of(before), rules_of(after));
        if old == new {
            return None;
        }
        let mut change = RulesChange::default();
        for (group, (rules, delay)) in &new {
            match old.get(group) {
                None => {
                    change.groups_added.push(group.clone());
                    change
                        .rules_added
                        .extend(rules.iter().map(|r| format!("{group}: {r}")));
                    if delay.is_some() {
                        change.crawl_delays.push((group.clone(), None, *delay));
                    }
                }
                Some((old_rules, old_delay)) => {
                    change
                        .rules_added
                        .extend(rules.difference(old_rules).map(|r| format!("{group}: {r}")));
                    change
                        .rules_removed
                        .extend(old_rules.difference(rules).map(|r| format!("{group}: {r}")));
                    if old_delay != delay {
                        change
                            .crawl_delays
                            .push((group.clone(), *old_delay, *delay));
                    }
                }
            }
        }
        for (group, (rules, delay)) in &old {
            if !new.contains_key(group) {
                change.groups_removed.push(group.clone());
                change
                    .rules_removed
                    .extend(rules.iter().map(|r| format!("{group}: {r}")));
                if delay.is_some() {
                    change.crawl_delays.push((group.clone(), *delay, None));
                }
            }
        }
        Some(change)
    }
}

impl std::fmt::Display for RulesChange {
    /// One line: `groups +1 -0; rules +2 -1 (+ *: Disallow: /new; - *: Disallow: /old);
    /// crawl-delay *: 1 → 5`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "groups +{} -{}; rules +{} -{}",
            self.groups_added.len(),
            self.groups_removed.len(),
            self.rules_added.len(),
            self.rules_removed.len()
        )?;
        let shown: Vec<String> = self
            .rules_added
            .iter()
            .map(|r| format!("+ {r}"))
            .chain(self.rules_removed.iter().map(|r| format!("- {r}")))
            .take(6)
            .collect();
        if !shown.is_empty() {
            let more = self.rules_added.len() + self.rules_removed.len() - shown.len();
            let more = if more > 0 {
                format!("; {more} more")
            } else {
                String::new()
            };
            write!(f, " ({}{more})", shown.join("; "))?;
        }
        let seconds = |d: &Option<f64>| d.map_or("none".to_string(), |d| format!("{d}"));
        for (group, before, after) in &self.crawl_delays {
            write!(
                f,
                "; crawl-delay {group}: {} -> {}",
                seconds(before),
                seconds(after)
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> RobotsTxt {
        RobotsTxt::parse(text.as_bytes())
    }

    #[test]
    fn comments_order_and_case_are_not_changes() {
        let a = parse("User-agent: *\nDisallow: /a\nAllow: /b\n");
        let b = parse("# new comment\nuser-agent: *\n\nallow: /b\ndisallow: /a # why\nSitemap: https://x/s.xml\n");
        assert_eq!(RulesChange::between(Some(&a), Some(&b)), None);
    }

    #[test]
    fn rules_groups_and_delays_are_reported() {
        let a = parse(
            "User-agent: *\nDisallow: /old\nCrawl-delay: 1\n\nUser-agent: gone\nDisallow: /\n",
        );
        let b = parse(
            "User-agent: *\nDisallow: /new\nCrawl-delay: 5\n\nUser-agent: ExampleBot\nAllow: /\n",
        );
        let change = RulesChange::between(Some(&a), Some(&b)).expect("changed");
        assert_eq!(change.groups_added, vec!["examplebot"]);
        assert_eq!(change.groups_removed, vec!["gone"]);
        assert!(change
            .rules_added
            .contains(&"*: Disallow: /new".to_string()));
        assert!(change
            .rules_removed
            .contains(&"*: Disallow: /old".to_string()));
        assert_eq!(
            change.crawl_delays,
            vec![("*".to_string(), Some(1.0), Some(5.0))]
        );
        let text = change.to_string();
        assert!(text.starts_with("groups +1 -1; rules +2 -2"), "{text}");
        assert!(text.contains("crawl-delay *: 1 -> 5"), "{text}");
    }

    #[test]
    fn appearing_and_vanishing_files_are_changes() {
        let a = parse("User-agent: *\nDisallow: /a\n");
        assert!(RulesChange::between(None, Some(&a)).is_some());
        assert!(RulesChange::between(Some(&a), None).is_some());
        assert_eq!(RulesChange::between(None, None), None);
        // A file with no rules is no change from no file.
        assert_eq!(
            RulesChange::between(None, Some(&parse("# nothing\n"))),
            None
        );
    }
}
