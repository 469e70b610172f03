//! Signed values: an HMAC-SHA256 tag over a stored value, bound to its key and flags, so a
//! client holding the signing keys reads back only what one of them wrote. Pure: no I/O, no
//! Python; the binding's value policy (`py::values`) decides when to sign and verify. Uses
//! `ring`'s HMAC (already linked for TLS) and nothing else of the crate.
//!
//! Layout of a signed value's bytes: `MAGIC`, the 32-byte tag, then the body (the pickled and
//! possibly compressed value). `MAGIC` is 0xFF so that a client that does not know the format
//! fails at once and harmlessly: 0xFF is no pickle opcode (`pickle.loads` raises "invalid load
//! key") and no zlib header (`zlib.decompress` raises "incorrect header check").

use ::ring::hmac;

/// The flag bit of a signed value (pylibmc uses bits 0 to 4 and ignores the others).
pub const FLAG_SIGNED: u32 = 1 << 8;
/// The first byte of a signed value.
pub const MAGIC: u8 = 0xFF;
const TAG_LEN: usize = 32;
/// What a signed value adds to its body.
pub const OVERHEAD: usize = 1 + TAG_LEN;
/// Shorter keys are refused: a guessable key signs nothing.
pub const MIN_KEY_LEN: usize = 16;
/// Domain separation: a tag made for this format means nothing anywhere else. Short, so that a
/// small value's tag takes one SHA-256 block less.
const CONTEXT: &[u8] = b"fmc1";

/// The signing keys: the first signs, every one verifies (older keys, for rotation).
#[derive(Clone)]
pub struct Signer {
    keys: Vec<hmac::Key>,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print a key.
        write!(f, "Signer({} keys)", self.keys.len())
    }
}

/// Why a value was not accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Too short, or not starting with `MAGIC`.
    Malformed,
    /// No key made this tag (for this key and flags).
    BadSignature,
}

impl Signer {
    /// `keys`: the current key first. Each must be at least `MIN_KEY_LEN` bytes.
    pub fn new<K: AsRef<[u8]>>(keys: &[K]) -> Result<Signer, String> {
        if keys.is_empty() {
            return Err("signing_keys needs at least one key".into());
        }
        if let Some(short) = keys.iter().position(|k| k.as_ref().len() < MIN_KEY_LEN) {
            return Err(format!(
                "signing key {short} is shorter than {MIN_KEY_LEN} bytes (use a random secret, \
                 e.g. secrets.token_urlsafe(32))"
            ));
        }
        let keys = keys
            .iter()
            .map(|k| hmac::Key::new(hmac::HMAC_SHA256, k.as_ref()))
            .collect();
        Ok(Signer { keys })
    }

    fn tag(k: &hmac::Key, key: &[u8], flags: u32, body: &[u8]) -> hmac::Tag {
        let mut ctx = hmac::Context::with_key(k);
        ctx.update(CONTEXT);
        ctx.update(&flags.to_be_bytes());
        ctx.update(&(key.len() as u32).to_be_bytes());
        ctx.update(key);
        ctx.update(body);
        ctx.sign()
    }

    /// The stored bytes of `body` for `key`; `flags` are the stored flags (with `FLAG_SIGNED`).
    pub fn sign(&self, key: &[u8], flags: u32, body: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(OVERHEAD + body.len());
        out.push(MAGIC);
        if let Some(k) = self.keys.first() {
            out.extend_from_slice(Self::tag(k, key, flags, body).as_ref());
        }
        out.extend_from_slice(body);
        out
    }

    /// The body of a signed value, if one of the keys made its tag for this key and flags.
    pub fn verify<'a>(&self, key: &[u8], flags: u32, data: &'a [u8]) -> Result<&'a [u8], Refusal> {
        if data.len() < OVERHEAD || data[0] != MAGIC {
            return Err(Refusal::Malformed);
        }
        let (tag, body) = data[1..].split_at(TAG_LEN);
        if self
            .keys
            .iter()
            .any(|k| constant_time_eq(Self::tag(k, key, flags, body).as_ref(), tag))
        {
            return Ok(body);
        }
        Err(Refusal::BadSignature)
    }
}

/// Equal slices, compared without an early exit (no timing hint of where they differ).
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    const K1: &[u8] = b"0123456789abcdef-first";
    const K2: &[u8] = b"0123456789abcdef-second";
    const F: u32 = FLAG_SIGNED | 1;

    #[test]
    fn a_signed_value_verifies_and_gives_back_its_body() {
        let s = Signer::new(&[K1]).unwrap();
        let data = s.sign(b"k", F, b"body");
        assert_eq!(data.len(), OVERHEAD + 4);
        assert_eq!(data[0], MAGIC);
        assert_eq!(s.verify(b"k", F, &data), Ok(&b"body"[..]));
    }

    #[test]
    fn the_tag_binds_the_key_the_flags_and_every_byte() {
        let s = Signer::new(&[K1]).unwrap();
        let data = s.sign(b"k", F, b"body");
        assert_eq!(s.verify(b"other", F, &data), Err(Refusal::BadSignature));
        assert_eq!(s.verify(b"k", F | 8, &data), Err(Refusal::BadSignature));
        for i in 1..data.len() {
            let mut bad = data.clone();
            bad[i] ^= 1;
            assert_eq!(
                s.verify(b"k", F, &bad),
                Err(Refusal::BadSignature),
                "byte {i}"
            );
        }
        let mut longer = data.clone();
        longer.push(0);
        assert_eq!(s.verify(b"k", F, &longer), Err(Refusal::BadSignature));
    }

    #[test]
    fn key_and_body_boundaries_cannot_be_shifted() {
        let s = Signer::new(&[K1]).unwrap();
        let data = s.sign(b"ab", F, b"c");
        let mut shifted = vec![MAGIC];
        shifted.extend_from_slice(&data[1..OVERHEAD]);
        shifted.extend_from_slice(b"bc");
        assert_eq!(s.verify(b"a", F, &shifted), Err(Refusal::BadSignature));
    }

    #[test]
    fn older_keys_verify_and_the_first_signs() {
        let old = Signer::new(&[K2]).unwrap();
        let rotated = Signer::new(&[K1, K2]).unwrap();
        let by_old = old.sign(b"k", F, b"v");
        assert_eq!(rotated.verify(b"k", F, &by_old), Ok(&b"v"[..]));
        let by_new = rotated.sign(b"k", F, b"v");
        assert_eq!(old.verify(b"k", F, &by_new), Err(Refusal::BadSignature));
        assert_eq!(
            Signer::new(&[K1]).unwrap().verify(b"k", F, &by_new),
            Ok(&b"v"[..])
        );
    }

    #[test]
    fn malformed_values_and_weak_keys_are_refused() {
        let s = Signer::new(&[K1]).unwrap();
        assert_eq!(s.verify(b"k", F, b""), Err(Refusal::Malformed));
        assert_eq!(s.verify(b"k", F, &[MAGIC; 32]), Err(Refusal::Malformed));
        let mut no_magic = s.sign(b"k", F, b"v");
        no_magic[0] = 0x80;
        assert_eq!(s.verify(b"k", F, &no_magic), Err(Refusal::Malformed));
        assert!(Signer::new::<&[u8]>(&[]).is_err());
        assert!(Signer::new(&[&b"short"[..]])
            .unwrap_err()
            .contains("shorter than 16"));
        assert!(Signer::new(&[K1, b"short"]).unwrap_err().contains("key 1"));
    }

    #[test]
    fn keys_are_never_printed() {
        let s = Signer::new(&[K1]).unwrap();
        assert_eq!(format!("{s:?}"), "Signer(1 keys)");
    }
}
