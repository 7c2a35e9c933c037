//! Finding the deciding rule of a group in one walk over the path.
//!
//! The naive way to apply a group — test every rule, keep the longest match — costs
//! `O(rules × path)` per URL, and large sites have hundreds of rules. Instead each group's
//! rules are compiled into a byte trie keyed by their literal prefix (the octets before the
//! first `*`):
//!
//! * a rule without `*` is a pure prefix (or, with `$`, an exact path): it sits at the trie
//!   node its whole text leads to, and matches exactly when the walk along the path
//!   reaches that node (and, for `$`, the path ends there);
//! * a rule with `*` sits at the node of its literal prefix, in a list sorted by priority;
//!   when the walk reaches that node, the rest of the pattern is checked against the rest
//!   of the path — but only for rules that could still beat the best match found so far.
//!
//! So a URL costs one walk of at most `path.len()` steps (each a search among a node's
//! few child edges), plus the wildcard rules on the walk's route that are long enough to
//! matter. Nodes and edges live in flat arrays (`u32` indices): a group of a few hundred
//! rules is a few tens of KiB, built once per robots.txt and never mutated afterwards.

use super::pattern::{Pattern, Priority};

const NONE: u32 = u32::MAX;

/// One rule as the index sees it.
pub(crate) struct IndexedRule<'a> {
    pub(crate) id: u32,
    pub(crate) allow: bool,
    pub(crate) pattern: &'a Pattern,
}

/// Orders competing matches: longer pattern first, and on equal length `allow` wins.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
struct Rank(u64);

impl Rank {
    const NOTHING: Rank = Rank(0);
    fn new(priority: Priority, allow: bool) -> Rank {
        // +1 so that even a zero-length rule outranks "no match".
        Rank(((u64::from(priority) + 1) << 1) | u64::from(allow))
    }
}

#[derive(Clone, Copy, Debug)]
struct Node {
    /// Child edges are `edge_bytes[first_edge..first_edge + edge_count]`, sorted.
    first_edge: u32,
    edge_count: u32,
    /// Best plain-prefix rule whose text ends here (allow preferred: all have one length).
    prefix_rule: (Rank, u32),
    /// Best `$`-anchored literal rule whose text ends here.
    exact_rule: (Rank, u32),
    /// Wildcard rules with this literal prefix: `wild[first_wild..first_wild + wild_count]`.
    first_wild: u32,
    wild_count: u32,
}

/// The compiled rules of one group (after merging), ready to decide a path.
#[derive(Default, Debug)]
pub(crate) struct RuleIndex {
    nodes: Vec<Node>,
    edge_bytes: Vec<u8>,
    edge_targets: Vec<u32>,
    /// Wildcard rules, grouped per node, each group sorted by rank (best first).
    wild: Vec<(Rank, u32)>,
}

/// A node while building: children in a sorted map.
#[derive(Default)]
struct BuildNode {
    children: std::collections::BTreeMap<u8, usize>,
    prefix_rule: Option<(Rank, u32)>,
    exact_rule: Option<(Rank, u32)>,
    wild: Vec<(Rank, u32)>,
}

fn better(slot: &mut Option<(Rank, u32)>, cand: (Rank, u32)) {
    if slot.is_none_or(|cur| cand.0 > cur.0) {
        *slot = Some(cand);
    }
}

impl RuleIndex {
    pub(crate) fn build(rules: &[IndexedRule<'_>]) -> RuleIndex {
        let mut tree = vec![BuildNode::default()];
        for rule in rules {
            let r = Rank::new(rule.pattern.priority, rule.allow);
            let mut node = 0;
            for &b in rule.pattern.prefix.iter() {
                node = match tree[node].children.get(&b) {
                    Some(&child) => child,
                    None => {
                        tree.push(BuildNode::default());
                        let child = tree.len() - 1;
                        tree[node].children.insert(b, child);
                        child
                    }
                };
            }
            let slot = &mut tree[node];
            if rule.pattern.has_wildcard() {
                slot.wild.push((r, rule.id));
            } else if rule.pattern.anchored {
                better(&mut slot.exact_rule, (r, rule.id));
            } else {
                better(&mut slot.prefix_rule, (r, rule.id));
            }
        }

        // Flatten breadth-first so that a node's children are adjacent.
        let mut index = RuleIndex::default();
        let mut order = vec![0usize];
        let mut position = vec![0u32; tree.len()];
        let mut head = 0;
        while head < order.len() {
            let id = order[head];
            position[id] = head as u32;
            head += 1;
            order.extend(tree[id].children.values().copied());
        }
        for &id in &order {
            let node = &mut tree[id];
            node.wild.sort_by_key(|&(rank, _)| std::cmp::Reverse(rank));
            index.nodes.push(Node {
                first_edge: index.edge_bytes.len() as u32,
                edge_count: node.children.len() as u32,
                prefix_rule: node.prefix_rule.unwrap_or((Rank::NOTHING, NONE)),
                exact_rule: node.exact_rule.unwrap_or((Rank::NOTHING, NONE)),
                first_wild: index.wild.len() as u32,
                wild_count: node.wild.len() as u32,
            });
            for (&b, &child) in &node.children {
                index.edge_bytes.push(b);
                // Children are pushed to `order` before they are visited, so their final
                // position is their place in `order`, known once the BFS is complete.
                index.edge_targets.push(child as u32);
            }
            index.wild.append(&mut node.wild);
        }
        for target in &mut index.edge_targets {
            *target = position[*target as usize];
        }
        index.nodes.shrink_to_fit();
        index.wild.shrink_to_fit();
        index
    }

    fn child(&self, node: &Node, b: u8) -> Option<usize> {
        let start = node.first_edge as usize;
        let edges = &self.edge_bytes[start..start + node.edge_count as usize];
        // Fan-out is small (path characters); a linear scan beats a binary search here.
        edges
            .iter()
            .position(|&e| e == b)
            .map(|i| self.edge_targets[start + i] as usize)
    }

    /// The id of the deciding rule for `path` (canonical), or `None` if no rule matches.
    /// `pattern_of` maps a wildcard rule's id to its compiled pattern.
    pub(crate) fn decide<'p>(
        &self,
        path: &[u8],
        pattern_of: impl Fn(u32) -> &'p Pattern,
    ) -> Option<u32> {
        let mut best = (Rank::NOTHING, NONE);
        // Wildcard lists on the route are checked after the walk, when the best literal
        // match is known and can prune them; the route is short, so a fixed buffer does.
        let mut route = [(0u32, 0u32); 32];
        let mut route_len = 0;
        let mut node_id = 0usize;
        let mut depth = 0usize;
        while let Some(node) = self.nodes.get(node_id) {
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
                    self.check_wild(
                        node.first_wild,
                        node.wild_count,
                        path,
                        &pattern_of,
                        &mut best,
                    );
                }
            }
            let Some(&b) = path.get(depth) else { break };
            match self.child(node, b) {
                Some(next) => {
                    node_id = next;
                    depth += 1;
                }
                None => break,
            }
        }
        for &(first, count) in &route[..route_len] {
            self.check_wild(first, count, path, &pattern_of, &mut best);
        }
        (best.1 != NONE).then_some(best.1)
    }

    fn check_wild<'p>(
        &self,
        first: u32,
        count: u32,
        path: &[u8],
        pattern_of: &impl Fn(u32) -> &'p Pattern,
        best: &mut (Rank, u32),
    ) {
        let list = &self.wild[first as usize..(first + count) as usize];
        for &(rank, id) in list {
            if rank <= best.0 {
                break; // sorted: nothing further down can win
            }
            if pattern_of(id).matches_after_prefix(path) {
                *best = (rank, id);
                break;
            }
        }
    }
}
