//! The Merkle tree a head signs over a segment's records, as Certificate Transparency
//! builds it (RFC 6962 §2.1, RFC 9162 §2.1): a leaf's hash is `SHA-256(0x00 || leaf)`, a
//! node's `SHA-256(0x01 || left || right)`, and a tree of `n` leaves splits at the
//! largest power of two below `n`. A record's inclusion proof (its audit path) lets a
//! bundle carry some records of a segment, not all, each still checked against the
//! signed root.
//!
//! Costs: a root over `n` leaves, `n` leaf hashes and `n − 1` node hashes; the proofs of
//! all of a segment's records, one [`Tree`] (the same `n − 1` node hashes, kept) and
//! `⌈log₂ n⌉` copies each; checking one, `⌈log₂ n⌉` hashes.

use ring::digest::{Context, SHA256};

/// A SHA-256 value.
pub type Hash = [u8; 32];

/// The hash of a leaf: `SHA-256(0x00 || leaf)`.
pub fn leaf_hash(leaf: &[u8]) -> Hash {
    let mut context = Context::new(&SHA256);
    context.update(&[0]);
    context.update(leaf);
    digest(context)
}

/// The hash of a node: `SHA-256(0x01 || left || right)`.
fn node_hash(left: &Hash, right: &Hash) -> Hash {
    let mut context = Context::new(&SHA256);
    context.update(&[1]);
    context.update(left);
    context.update(right);
    digest(context)
}

/// A finished SHA-256 as an array.
fn digest(context: Context) -> Hash {
    let mut out = [0u8; 32];
    out.copy_from_slice(context.finish().as_ref());
    out
}

/// The largest power of two below `n` (`n` > 1).
fn split(n: usize) -> usize {
    let mut k = 1;
    while k << 1 < n {
        k <<= 1;
    }
    k
}

/// The root over `leaves` (leaf hashes); the hash of the empty string for none.
pub fn root(leaves: &[Hash]) -> Hash {
    match leaves.len() {
        0 => digest(Context::new(&SHA256)),
        1 => leaves[0],
        n => {
            let k = split(n);
            node_hash(&root(&leaves[..k]), &root(&leaves[k..]))
        }
    }
}

/// A tree grown one leaf at a time, holding only its perfect subtrees (one per bit of
/// its size, largest first): a leaf costs one hash and a merge per carry, its root
/// `⌈log₂ n⌉` hashes, and it holds `⌈log₂ n⌉` hashes however many leaves it has.
#[derive(Clone, Debug, Default)]
pub struct Frontier {
    /// The perfect subtrees: their sizes and roots, largest first.
    subtrees: Vec<(u64, Hash)>,
    /// Leaves taken.
    size: u64,
}

impl Frontier {
    /// Takes the leaf whose hash is `leaf`.
    pub fn push(&mut self, leaf: Hash) {
        let mut merged = (1u64, leaf);
        while let Some(&(size, left)) = self.subtrees.last() {
            if size != merged.0 {
                break;
            }
            self.subtrees.pop();
            merged = (size * 2, node_hash(&left, &merged.1));
        }
        self.subtrees.push(merged);
        self.size += 1;
    }

    /// Leaves taken.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The root over the leaves taken, as [`root`] computes it (the smaller subtrees
    /// folded into the larger, right to left).
    pub fn root(&self) -> Hash {
        let mut subtrees = self.subtrees.iter().rev();
        let Some(&(_, mut right)) = subtrees.next() else {
            return root(&[]);
        };
        for (_, left) in subtrees {
            right = node_hash(left, &right);
        }
        right
    }
}

/// A tree's every level, built once so that each of its leaves' audit paths costs
/// `⌈log₂ n⌉` copies: level 0 the leaves, each level above the hashes of the pairs of
/// the one below, a last node without a pair carried up as it is (which is RFC 6962's
/// split at the largest power of two, read bottom-up).
pub struct Tree {
    /// Level 0 the leaves, the last level the root alone.
    levels: Vec<Vec<Hash>>,
}

impl Tree {
    /// The tree over `leaves`: `n − 1` node hashes.
    pub fn new(leaves: &[Hash]) -> Tree {
        let mut levels = vec![leaves.to_vec()];
        while let Some(below) = levels.last().filter(|l| l.len() > 1) {
            let above = below
                .chunks(2)
                .map(|pair| match pair {
                    [left, right] => node_hash(left, right),
                    [alone] => *alone,
                    _ => unreachable!("chunks(2) yields one or two"),
                })
                .collect();
            levels.push(above);
        }
        Tree { levels }
    }

    /// The audit path of leaf `m` (RFC 6962 `PATH(m, D[n])`), nearest the leaf first;
    /// empty for a single leaf or an `m` out of range.
    pub fn path(&self, m: usize) -> Vec<Hash> {
        let mut path = Vec::new();
        if self.levels.first().is_none_or(|l| m >= l.len()) {
            return path;
        }
        let mut at = m;
        for level in &self.levels {
            // A node without a pair at this level has no sibling to name.
            if let Some(sibling) = level.get(at ^ 1) {
                path.push(*sibling);
            }
            at /= 2;
        }
        path
    }
}

/// Does `path` prove that the leaf whose hash is `leaf` is leaf `m` of a tree of `n`
/// leaves whose root is `root` (RFC 9162 §2.1.3.2)?
pub fn proves(m: usize, n: usize, leaf: &Hash, path: &[Hash], root: &Hash) -> bool {
    if m >= n {
        return false;
    }
    let (mut f_n, mut s_n) = (m, n - 1);
    let mut r = *leaf;
    for p in path {
        if s_n == 0 {
            return false;
        }
        if f_n & 1 == 1 || f_n == s_n {
            r = node_hash(p, &r);
            if f_n & 1 == 0 {
                while f_n & 1 == 0 && f_n != 0 {
                    f_n >>= 1;
                    s_n >>= 1;
                }
            }
        } else {
            r = node_hash(&r, p);
        }
        f_n >>= 1;
        s_n >>= 1;
    }
    s_n == 0 && r == *root
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 6962's recursive `PATH(m, D[n])`, as the RFC writes it: what [`Tree::path`]
    /// must equal.
    fn path(m: usize, leaves: &[Hash]) -> Vec<Hash> {
        let n = leaves.len();
        if n <= 1 || m >= n {
            return Vec::new();
        }
        let k = split(n);
        if m < k {
            let mut p = path(m, &leaves[..k]);
            p.push(root(&leaves[k..]));
            p
        } else {
            let mut p = path(m - k, &leaves[k..]);
            p.push(root(&leaves[..k]));
            p
        }
    }

    fn leaves(n: usize) -> Vec<Hash> {
        (0..n)
            .map(|i| leaf_hash(format!("record {i}").as_bytes()))
            .collect()
    }

    #[test]
    fn every_leaf_of_every_size_is_proven_and_nothing_else_is() {
        for n in 1..40 {
            let all = leaves(n);
            let top = root(&all);
            let tree = Tree::new(&all);
            for m in 0..n {
                let p = tree.path(m);
                assert_eq!(p, path(m, &all), "{m} of {n}: the RFC's path");
                assert!(proves(m, n, &all[m], &p, &top), "{m} of {n}");
                // Another leaf, another index, a changed root: refused. (The size is the
                // signed head's: a proof is checked against the size it signs.)
                let other = leaf_hash(b"not a record");
                assert!(!proves(m, n, &other, &p, &top), "{m} of {n}: a forged leaf");
                if n > 1 {
                    assert!(
                        !proves((m + 1) % n, n, &all[m], &p, &top),
                        "{m} of {n}: moved"
                    );
                }
                let mut bent = top;
                bent[0] ^= 1;
                assert!(
                    !proves(m, n, &all[m], &p, &bent),
                    "{m} of {n}: another root"
                );
            }
        }
    }

    #[test]
    fn a_frontier_grown_leaf_by_leaf_has_the_trees_root() {
        let all = leaves(70);
        let mut frontier = Frontier::default();
        assert_eq!(frontier.root(), root(&[]));
        for n in 1..=all.len() {
            frontier.push(all[n - 1]);
            assert_eq!(frontier.root(), root(&all[..n]), "{n} leaves");
            assert_eq!(frontier.size(), n as u64);
        }
    }

    /// RFC 6962's shape, spelled out for three leaves: `(0, 1), 2`.
    #[test]
    fn the_tree_splits_at_the_largest_power_of_two_below_its_size() {
        let l = leaves(3);
        assert_eq!(root(&l), node_hash(&node_hash(&l[0], &l[1]), &l[2]));
        assert_eq!(path(2, &l), vec![node_hash(&l[0], &l[1])]);
        assert_eq!(path(0, &l), vec![l[1], l[2]]);
        // The empty tree's root is the hash of the empty string.
        assert_eq!(
            hex(&root(&[])),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    fn hex(h: &Hash) -> String {
        h.iter().map(|b| format!("{b:02x}")).collect()
    }
}
