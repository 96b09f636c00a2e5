//! BCLO's lazily sampled tree: node splits, leaf choices and their coins.
//!
//! A node is (domain interval, range interval). Its range halves exactly (a
//! power of two), so the range tree is the same for every key and a node is
//! named by its depth and range start; only the domain splits are random.
//!
//! Two memories make descents cheap without changing any result:
//! * the splits of the first `MEMO_DEPTH` levels, in arrays (every plaintext
//!   passes through them);
//! * the path of the previous descent: a new one resumes at the deepest node
//!   of that path holding its target. Callers walk sorted batches, so
//!   neighbouring values (and clustered data, whose values share dozens of
//!   levels below the memoised top) skip their common prefix.

use aes::cipher::{generic_array::GenericArray, BlockEncrypt};
use aes::Aes256;
use rand_core::RngCore;

use crate::hgd;

/// Levels of the tree whose splits are memoised (2^MEMO_DEPTH - 1 nodes, 4 MiB).
const MEMO_DEPTH: u32 = 18;
/// Marks a memo slot not yet computed; a slot holds its split plus one (a split is at
/// most 2^64). Zero, so that a level's array is zeroed memory, which the allocator
/// takes from the OS untouched: a level costs only the pages its descents touch, not
/// a fill of its whole array (4 MiB over the levels, paid by every key's first value).
const UNKNOWN: u128 = 0;

const INNER: u8 = 0;
const LEAF: u8 = 1;

/// Where a descent through the tree is going.
#[derive(Clone, Copy)]
pub enum Target {
    Plaintext(u64),
    Ciphertext(u128),
}

/// A node: `d_size` domain points from `d_low`, `r_size` range slots from `r_low`.
#[derive(Clone, Copy)]
struct Node {
    d_low: u128,
    d_size: u128,
    r_low: u128,
    r_size: u128,
}

impl Node {
    fn holds(&self, target: Target) -> bool {
        match target {
            Target::Plaintext(p) => (self.d_low..self.d_low + self.d_size).contains(&(p as u128)),
            Target::Ciphertext(c) => (self.r_low..self.r_low + self.r_size).contains(&c),
        }
    }

    /// The child towards `target`, given that `below` domain points map left.
    fn child(&self, below: u128, target: Target) -> Node {
        let half = self.r_size / 2;
        let left = match target {
            Target::Plaintext(p) => (p as u128) < self.d_low + below,
            Target::Ciphertext(c) => c < self.r_low + half,
        };
        if left {
            Node {
                d_size: below,
                r_size: half,
                ..*self
            }
        } else {
            Node {
                d_low: self.d_low + below,
                d_size: self.d_size - below,
                r_low: self.r_low + half,
                r_size: half,
            }
        }
    }
}

/// The tree of one key and parameter set.
pub struct Tree {
    prf: Aes256,
    bits: u32,
    cipher_bits: u32,
    signed: bool,
    memo: Vec<Vec<u128>>,
    /// Inner nodes of the last descent with their splits, root first.
    path: Vec<(Node, u128)>,
}

impl Tree {
    pub fn new(prf: Aes256, bits: u32, cipher_bits: u32, signed: bool) -> Self {
        Self {
            prf,
            bits,
            cipher_bits,
            signed,
            memo: Vec::new(),
            path: Vec::new(),
        }
    }

    /// Walks to the leaf of `target`: for a plaintext, returns (its point, its
    /// ciphertext); for a ciphertext, the leaf it leads to, or `None` if it
    /// leads to a side with no plaintexts.
    pub fn descend(&mut self, target: Target) -> Option<(u64, u128)> {
        let shared = self
            .path
            .iter()
            .take_while(|(node, _)| node.holds(target))
            .count();
        self.path.truncate(shared);
        let mut node = match self.path.last() {
            Some((node, below)) => node.child(*below, target),
            None => Node {
                d_low: 0,
                d_size: 1 << self.bits,
                r_low: 0,
                r_size: 1 << self.cipher_bits,
            },
        };
        let mut depth = shared as u32;
        while node.d_size > 1 {
            let below = self.split(depth, &node);
            self.path.push((node, below));
            node = node.child(below, target);
            depth += 1;
        }
        if node.d_size == 0 {
            return None;
        }
        let mut coins = self.coins(LEAF, depth, node.r_low);
        let offset = next_u128(&mut coins) & (node.r_size - 1);
        Some((node.d_low as u64, node.r_low + offset))
    }

    /// Domain points below the middle of the node's range (memoised near the root).
    fn split(&mut self, depth: u32, node: &Node) -> u128 {
        if depth >= MEMO_DEPTH {
            return self.sample_split(depth, node);
        }
        let level = depth as usize;
        if self.memo.len() <= level {
            self.memo.resize_with(level + 1, Vec::new);
        }
        if self.memo[level].is_empty() {
            self.memo[level] = vec![UNKNOWN; 1 << depth];
        }
        let index = (node.r_low >> (self.cipher_bits - depth)) as usize;
        if self.memo[level][index] == UNKNOWN {
            self.memo[level][index] = self.sample_split(depth, node) + 1;
        }
        self.memo[level][index] - 1
    }

    fn sample_split(&self, depth: u32, node: &Node) -> u128 {
        let mut coins = self.coins(INNER, depth, node.r_low);
        let bad = node.r_size - node.d_size;
        hgd::sample(node.d_size, bad, node.r_size / 2, &mut coins)
    }

    fn coins(&self, kind: u8, depth: u32, r_low: u128) -> NodeCoins<'_> {
        let mut name = [0u8; 16];
        name[0] = kind | (self.signed as u8) << 1 | ((self.bits - 1) as u8) << 2;
        name[1] = depth as u8;
        name[4..].copy_from_slice(&r_low.to_be_bytes()[4..]);
        NodeCoins {
            prf: &self.prf,
            name,
            counter: 0,
            words: [0; 4],
            used: 4,
        }
    }
}

/// BCLO's random tape for one node: AES-256 under the working key of the
/// blocks `kind | signed | bits-1, depth, counter (2 bytes), range start (12
/// bytes)` for counter = 0, 1, 2, ... (AES as a PRF in counter mode). The
/// range start and depth name the node uniquely; `cipher_bits` follows from
/// `bits`. A node uses a handful of blocks; the 16-bit counter would wrap only
/// after 2^16 rejected HGD proposals, which never happens in practice (and
/// stays deterministic if it did).
struct NodeCoins<'a> {
    prf: &'a Aes256,
    name: [u8; 16],
    counter: u16,
    words: [u64; 4],
    used: usize,
}

impl NodeCoins<'_> {
    fn refill(&mut self) {
        let mut blocks = [GenericArray::from(self.name), GenericArray::from(self.name)];
        for block in blocks.iter_mut() {
            block[2..4].copy_from_slice(&self.counter.to_be_bytes());
            self.counter = self.counter.wrapping_add(1);
        }
        self.prf.encrypt_blocks(&mut blocks);
        for (i, word) in self.words.iter_mut().enumerate() {
            let bytes = &blocks[i / 2][(i % 2) * 8..(i % 2) * 8 + 8];
            *word = u64::from_be_bytes(bytes.try_into().expect("8 bytes"));
        }
        self.used = 0;
    }
}

impl RngCore for NodeCoins<'_> {
    fn next_u64(&mut self) -> u64 {
        if self.used == self.words.len() {
            self.refill();
        }
        self.used += 1;
        self.words[self.used - 1]
    }

    fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    fn fill_bytes(&mut self, dest: &mut [u8]) {
        for chunk in dest.chunks_mut(8) {
            chunk.copy_from_slice(&self.next_u64().to_be_bytes()[..chunk.len()]);
        }
    }

    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand_core::Error> {
        self.fill_bytes(dest);
        Ok(())
    }
}

fn next_u128<R: RngCore>(rng: &mut R) -> u128 {
    let high = rng.next_u64() as u128;
    (high << 64) | rng.next_u64() as u128
}
