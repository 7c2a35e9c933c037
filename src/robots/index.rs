//! Finding the deciding rule of a group in one walk over the path.
//!
//! The naive way to apply a group — test every rule, keep the longest match — costs
//! `O(rules × path)` per URL, and large sites have hundreds of rules. Instead each group
//! is compiled into a radix tree keyed by each rule's literal prefix (the octets before
//! its first `*`):
//!
//! * a rule without `*` is a pure prefix (or, with `$`, an exact path). It sits at the
//!   node its text leads to and matches exactly when the walk along the path reaches that
//!   node (and, for `$`, the path ends there);
//! * a rule with `*` sits at the node of its literal prefix, in a list sorted best first.
//!   When the walk reaches that node the rest of the pattern is checked against the path —
//!   but only for rules that could still beat the best match found, and only if every
//!   octet the rest of the pattern needs occurs in the path (a 64-bit mask test).
//!
//! So a URL costs one walk of at most `path.len()` octet compares, plus the wildcard rules
//! on its route that are long enough to matter. The tree is built from the sorted
//! prefixes in one pass (no per-node allocation); nodes, labels and wildcard rules live in
//! flat arrays addressed by `u32`, so a group of a few hundred rules takes a few KiB.

use super::pattern::{Pattern, Priority};

/// No node, no rule.
const NONE: u32 = u32::MAX;

/// Orders competing matches: longer pattern first, and on equal length `allow` wins.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
struct Rank(u32);

impl Rank {
    /// Ranks below every match.
    const NOTHING: Rank = Rank(0);
    /// The rank of a rule with `priority` that allows (or not).
    fn new(priority: Priority, allow: bool) -> Rank {
        // +1 so that even a zero-length rule outranks "no match". Priorities are bounded
        // by the line length limit, far below u32::MAX / 2.
        Rank(((priority + 1) << 1) | u32::from(allow))
    }
}

/// One rule as the index is given it.
pub(crate) struct IndexedRule<'a> {
    /// The rule's id in its file.
    pub(crate) id: u32,
    /// Allow (or Disallow).
    pub(crate) allow: bool,
    /// Its compiled pattern.
    pub(crate) pattern: &'a Pattern,
}

/// A label is part of one pattern, and a pattern is one line at most, each octet of it
/// at most three once percent-encoded: its length fits 16 bits. So does a child count
/// (one per distinct octet).
const _: () = assert!(super::lexer::MAX_LINE_BYTES * 3 <= u16::MAX as usize);

/// One node of the trie of literal prefixes.
#[derive(Clone, Copy, Debug)]
struct Node {
    /// The octets leading into this node from its parent: `labels[label..label + len]`.
    label: u32,
    /// The label's length.
    label_len: u16,
    /// Children are `nodes[first_child..first_child + child_count]`, sorted by first octet.
    child_count: u16,
    /// Its first child's index.
    first_child: u32,
    /// Best rule without `*`/`$` whose text ends here (one length, so allow preferred).
    prefix_rule: (Rank, u32),
    /// Best `$`-anchored rule without `*` whose text ends here.
    exact_rule: (Rank, u32),
    /// Wildcard rules with this literal prefix: `wild[first_wild..first_wild + count]`.
    first_wild: u32,
    /// How many wildcard rules.
    wild_count: u32,
}

/// A rule with `*` (or `$` after a `*`): matched past its literal prefix.
#[derive(Debug)]
struct WildRule {
    /// Its rank.
    rank: Rank,
    /// Its id in the file.
    id: u32,
    /// Bit `b % 64` is set for every octet `b` the pattern needs after its prefix.
    needs: u64,
    /// The whole pattern.
    pattern: Pattern,
}

/// The compiled rules of one (merged) group.
#[derive(Debug, Default)]
pub(crate) struct RuleIndex {
    /// The trie, root first.
    nodes: Box<[Node]>,
    /// First octet of each node's label, parallel to `nodes`, for the child search.
    first_octets: Box<[u8]>,
    /// Every node's label, concatenated.
    labels: Box<[u8]>,
    /// The wildcard rules, grouped by the node of their prefix.
    wild: Box<[WildRule]>,
}

/// A [`RuleIndex`] while it is built.
#[derive(Default)]
struct Builder {
    /// The nodes so far.
    nodes: Vec<Node>,
    /// Their labels' first octets.
    first_octets: Vec<u8>,
    /// Their labels.
    labels: Vec<u8>,
    /// The wildcard rules so far.
    wild: Vec<WildRule>,
}

/// A bit per octet value (`b % 64`) present in `bytes`.
fn octet_mask(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0, |mask, &b| mask | 1 << (b & 63))
}

/// How many leading octets `a` and `b` share.
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

impl RuleIndex {
    /// Compiles `rules` into an index.
    pub(crate) fn build(rules: &[IndexedRule<'_>]) -> RuleIndex {
        let mut sorted: Vec<&IndexedRule<'_>> = rules.iter().collect();
        sorted.sort_by(|a, b| a.pattern.prefix().cmp(b.pattern.prefix()));

        let mut index = Builder::default();
        index.push_node(&[]);
        // (node, the rules below it, octets of prefix already consumed), built iteratively:
        // a robots.txt may nest prefixes deeply.
        let mut work = vec![(0usize, &sorted[..], 0usize)];
        while let Some((node, entries, depth)) = work.pop() {
            let here = entries
                .iter()
                .take_while(|r| r.pattern.prefix().len() == depth)
                .count();
            index.attach(node, &entries[..here]);
            let mut rest = &entries[here..];
            let first_child = index.nodes.len();
            let mut children = Vec::new();
            while let Some(first) = rest.first() {
                let octet = first.pattern.prefix()[depth];
                let len = rest
                    .iter()
                    .take_while(|r| r.pattern.prefix()[depth] == octet)
                    .count();
                let (group, tail) = rest.split_at(len);
                let last = group[len - 1].pattern.prefix();
                let end = depth + common_prefix(&first.pattern.prefix()[depth..], &last[depth..]);
                let child = index.push_node(&first.pattern.prefix()[depth..end]);
                children.push((child, group, end));
                rest = tail;
            }
            index.nodes[node].first_child = first_child as u32;
            index.nodes[node].child_count = children.len() as u16;
            work.extend(children);
        }
        // Kept for as long as the origin is held: exactly as large as it is.
        RuleIndex {
            nodes: index.nodes.into_boxed_slice(),
            first_octets: index.first_octets.into_boxed_slice(),
            labels: index.labels.into_boxed_slice(),
            wild: index.wild.into_boxed_slice(),
        }
    }
}

impl Builder {
    /// Adds a node whose label is `label`: its index.
    fn push_node(&mut self, label: &[u8]) -> usize {
        self.nodes.push(Node {
            label: self.labels.len() as u32,
            label_len: label.len() as u16,
            first_child: 0,
            child_count: 0,
            prefix_rule: (Rank::NOTHING, NONE),
            exact_rule: (Rank::NOTHING, NONE),
            first_wild: 0,
            wild_count: 0,
        });
        self.first_octets.push(label.first().copied().unwrap_or(0));
        self.labels.extend_from_slice(label);
        self.nodes.len() - 1
    }

    /// Attaches the rules whose literal prefix ends exactly at `node`.
    fn attach(&mut self, node: usize, rules: &[&IndexedRule<'_>]) {
        let first_wild = self.wild.len();
        for rule in rules {
            let rank = Rank::new(rule.pattern.priority, rule.allow);
            let slot = if rule.pattern.has_wildcard() {
                self.wild.push(WildRule {
                    rank,
                    id: rule.id,
                    needs: octet_mask(rule.pattern.tail_bytes()),
                    pattern: rule.pattern.clone(),
                });
                continue;
            } else if rule.pattern.anchored {
                &mut self.nodes[node].exact_rule
            } else {
                &mut self.nodes[node].prefix_rule
            };
            if rank > slot.0 {
                *slot = (rank, rule.id);
            }
        }
        self.wild[first_wild..].sort_by_key(|w| std::cmp::Reverse(w.rank));
        self.nodes[node].first_wild = first_wild as u32;
        self.nodes[node].wild_count = (self.wild.len() - first_wild) as u32;
    }
}

impl RuleIndex {
    /// The id of the deciding rule for `path` (canonical), or `None` if no rule matches.
    pub(crate) fn decide(&self, path: &[u8]) -> Option<u32> {
        let mut best = (Rank::NOTHING, NONE);
        // Wildcard lists on the route are checked after the walk, when the best literal
        // match is known and prunes them. Routes are short; past 16 lists, check at once.
        let mut route = [(0u32, 0u32); 16];
        let mut route_len = 0;
        let mut mask = None;
        let mut node = self.nodes.first()?;
        let mut depth = 0usize;
        loop {
            if node.prefix_rule.0 > best.0 {
                best = node.prefix_rule;
            }
            if depth == path.len() && node.exact_rule.0 > best.0 {
                best = node.exact_rule;
            }
            if node.wild_count > 0 {
                if route_len < route.len() {
                    route[route_len] = (node.first_wild, node.wild_count);
                    route_len += 1;
                } else {
                    self.check_wild(node.first_wild, node.wild_count, path, &mut mask, &mut best);
                }
            }
            let Some(&octet) = path.get(depth) else { break };
            let first = node.first_child as usize;
            let kids = &self.first_octets[first..first + node.child_count as usize];
            // Children are sorted by first octet. Most nodes have a handful (a scan is
            // fastest); the few near the root of a large file have dozens.
            let found = if kids.len() <= 8 {
                kids.iter().position(|&o| o == octet)
            } else {
                kids.binary_search(&octet).ok()
            };
            let Some(i) = found else {
                break;
            };
            let child = &self.nodes[first + i];
            let label =
                &self.labels[child.label as usize..child.label as usize + child.label_len as usize];
            if !path[depth..].starts_with(label) {
                break;
            }
            depth += label.len();
            node = child;
        }
        for &(first, count) in &route[..route_len] {
            self.check_wild(first, count, path, &mut mask, &mut best);
        }
        (best.1 != NONE).then_some(best.1)
    }

    /// Checks the wildcard rules `wild[first..first + count]` against `path`, keeping the best
    /// match in `best` (`mask`: the path's octets, computed once when first needed).
    fn check_wild(
        &self,
        first: u32,
        count: u32,
        path: &[u8],
        mask: &mut Option<u64>,
        best: &mut (Rank, u32),
    ) {
        for rule in &self.wild[first as usize..(first + count) as usize] {
            if rule.rank <= best.0 {
                break; // sorted best first: nothing further down can win
            }
            let have = *mask.get_or_insert_with(|| octet_mask(path));
            if rule.needs & !have == 0 && rule.pattern.matches_after_prefix(path) {
                *best = (rule.rank, rule.id);
                break;
            }
        }
    }
}
