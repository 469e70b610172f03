//! Large values taken with the read buffer they arrived in instead of copied into a fetch's
//! arena (`Connection::take_read_buffer`): the value a `GetSink` claimed among the bytes routed at
//! once, and the buffers handed over to the values claimed so far.
//!
//! Owns `Claims`. No I/O: `InFlight::parse_available` asks for the claim after each routing and
//! settles it with what the connection hands over.

/// Values from this size on may take the read buffer they came in: larger than any that fits a
/// read buffer of the usual size with its header.
pub(super) const CLAIM_FROM: usize = 64 * 1024;

/// A `GetSink`'s claims.
#[derive(Debug, Default)]
pub(super) struct Claims {
    /// Whether the bytes being routed are in a buffer that may be handed over.
    allowed: bool,
    /// The value claimed among them (one at most): its key, address and length.
    pending: Option<(u32, usize, usize)>,
    /// The buffers handed over, each with its value's offset in it (`Item::own` indexes them).
    pub owned: Vec<(Vec<u8>, usize)>,
}

impl Claims {
    pub fn allow(&mut self, allowed: bool) {
        self.allowed = allowed;
    }

    /// Claim `data`, key `k`'s value, if it may be: its index in `owned` (its buffer comes with
    /// `settle`).
    pub fn claim(&mut self, k: u32, data: &[u8]) -> Option<usize> {
        if !self.allowed || self.pending.is_some() || data.len() <= CLAIM_FROM {
            return None;
        }
        self.pending = Some((k, data.as_ptr() as usize, data.len()));
        self.owned.push((Vec::new(), 0));
        Some(self.owned.len() - 1)
    }

    /// The claimed value's address and length, waiting for its buffer.
    pub fn pending(&self) -> Option<(usize, usize)> {
        self.pending.map(|(_, at, len)| (at, len))
    }

    /// The buffer of the value claimed, and the value's offset in it; the claimed key when none
    /// came (its value is lost: the caller fails it).
    pub fn settle(&mut self, taken: Option<(Vec<u8>, usize)>) -> Option<u32> {
        let (k, _, _) = self.pending.take()?;
        match (taken, self.owned.last_mut()) {
            (Some(t), Some(slot)) => {
                *slot = t;
                None
            }
            _ => Some(k),
        }
    }
}
