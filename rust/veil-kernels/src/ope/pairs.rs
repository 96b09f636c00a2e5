//! The plaintext <-> ciphertext caches and their keyed hash.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};

use aes::cipher::{generic_array::GenericArray, BlockEncrypt};
use aes::Aes256;

/// Pairs cached before the caches are emptied (~60 MB).
const LIMIT: usize = 1 << 20;

/// Both directions of the pairs seen so far, so repeats cost one lookup.
pub struct Pairs {
    /// Ciphertexts as (high, low) halves: 8-byte alignment keeps entries small.
    encrypted: HashMap<u64, (u64, u64), KeyedHash>,
    decrypted: HashMap<u128, u64, KeyedHash>,
}

impl Pairs {
    pub fn new(prf: &Aes256) -> Self {
        let hash = KeyedHash::from_prf(prf);
        Self {
            encrypted: HashMap::with_hasher(hash),
            decrypted: HashMap::with_hasher(hash),
        }
    }

    pub fn ciphertext(&self, point: u64) -> Option<u128> {
        let &(high, low) = self.encrypted.get(&point)?;
        Some((high as u128) << 64 | low as u128)
    }

    pub fn point(&self, c: u128) -> Option<u64> {
        self.decrypted.get(&c).copied()
    }

    pub fn remember(&mut self, point: u64, c: u128) {
        if self.encrypted.len() >= LIMIT {
            self.encrypted.clear();
            self.decrypted.clear();
        }
        self.encrypted.insert(point, ((c >> 64) as u64, c as u64));
        self.decrypted.insert(c, point);
    }
}

/// A fast hash for the pair caches, keyed from the PRF so that nobody without
/// the key can choose plaintexts that collide (SipHash costs 4x as much here).
#[derive(Clone, Copy)]
struct KeyedHash {
    multiplier: u64,
}

impl KeyedHash {
    fn from_prf(prf: &Aes256) -> Self {
        let mut block = GenericArray::from([0xffu8; 16]); // no node name has depth 0xff
        prf.encrypt_block(&mut block);
        let word = u64::from_le_bytes(block[..8].try_into().expect("8 bytes"));
        Self {
            multiplier: word | 1,
        }
    }
}

impl BuildHasher for KeyedHash {
    type Hasher = KeyedHasher;
    fn build_hasher(&self) -> KeyedHasher {
        KeyedHasher {
            multiplier: self.multiplier,
            state: 0,
        }
    }
}

/// Folded 128-bit multiply of each word into the state (as in wyhash).
struct KeyedHasher {
    multiplier: u64,
    state: u64,
}

impl Hasher for KeyedHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, word: u64) {
        let product = ((self.state ^ word) as u128) * (self.multiplier as u128);
        self.state = (product >> 64) as u64 ^ product as u64;
    }

    fn write_u128(&mut self, word: u128) {
        self.write_u64(word as u64);
        self.write_u64((word >> 64) as u64);
    }

    fn finish(&self) -> u64 {
        self.state
    }
}
