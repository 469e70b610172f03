//! zstd compression of values (opt-in, docs/features.md#compression-zstd) and its bounded
//! decompression. Pure: no I/O, no Python; the binding (`py::serde`) owns the flag bit and
//! decides when to compress. Uses `zstd-safe` (the reference C library) and nothing else of the
//! crate.
//!
//! Reading never trusts a frame: a declared content size above the caller's bound is refused
//! before anything is allocated, a frame without one is decoded in steps into a buffer that
//! stops growing at the bound (with the decoder's window capped to the bound, or 8 MiB for a
//! smaller one), and every frame this
//! module writes carries zstd's checksum, so a corrupted or mis-decoded value is an error, never
//! other bytes. A frame made with a dictionary names it (its ID); reading it without that
//! dictionary is an error that says so.

use std::cell::RefCell;
use std::num::NonZeroU32;

use zstd_safe::{CCtx, CDict, CParameter, DCtx, DDict, DParameter, InBuffer, OutBuffer};

/// The levels a client may ask for (zstd's own range, negative levels being its fast modes).
pub const LEVELS: std::ops::RangeInclusive<i32> = -7..=22;
/// The level when none is given: zstd's default.
pub const DEFAULT_LEVEL: i32 = 3;

/// Why a value could not be decompressed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// It would decompress to more than the bound (`declared`: what its frame header said).
    TooLarge { declared: Option<u64> },
    /// A frame without a declared size asks for a decoding window larger than the bound.
    Window,
    /// Not zstd frames, truncated, corrupted, or a checksum that does not match.
    Corrupt(&'static str),
    /// It was compressed with dictionary `needed`; the reader has `have` (`None`: none).
    Dictionary { needed: u32, have: Option<u32> },
    /// The output buffer could not be allocated (this many bytes).
    Alloc(usize),
}

/// A compression dictionary, prepared once for both directions.
pub struct Dictionary {
    id: NonZeroU32,
    cdict: CDict<'static>,
    ddict: DDict<'static>,
}

impl std::fmt::Debug for Dictionary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Dictionary({})", self.id)
    }
}

impl Dictionary {
    /// The dictionary's ID, which each frame compressed with it carries.
    pub fn id(&self) -> u32 {
        self.id.get()
    }
}

/// A client's zstd settings: the level and the optional dictionary.
#[derive(Debug)]
pub struct Zstd {
    level: i32,
    dict: Option<Dictionary>,
}

impl Zstd {
    /// Check and prepare the settings. A dictionary must be one in zstd's format (it has an ID:
    /// `train` or `zstd --train` make them), so that a value needing it says which one.
    pub fn new(level: i32, dict: Option<&[u8]>) -> Result<Zstd, String> {
        if !LEVELS.contains(&level) {
            return Err(format!(
                "zstd_level must be from {} to {}, not {level}",
                LEVELS.start(),
                LEVELS.end()
            ));
        }
        let dict = match dict {
            None => None,
            Some(bytes) => Some(Dictionary::new(bytes, level)?),
        };
        Ok(Zstd { level, dict })
    }

    pub fn level(&self) -> i32 {
        self.level
    }

    pub fn dictionary(&self) -> Option<&Dictionary> {
        self.dict.as_ref()
    }

    /// `src` compressed into one frame (with its content size, its checksum and, with a
    /// dictionary, the dictionary's ID); `None` when the result is not shorter than `src`, which
    /// is then stored as it is (pylibmc's rule for zlib).
    pub fn compress(&self, src: &[u8]) -> Result<Option<Vec<u8>>, Failure> {
        let bound = zstd_safe::compress_bound(src.len());
        let mut out = Vec::new();
        out.try_reserve_exact(bound)
            .map_err(|_| Failure::Alloc(bound))?;
        with_cctx(|cctx| {
            cctx.reset(zstd_safe::ResetDirective::SessionAndParameters)
                .map_err(corrupt)?;
            cctx.set_parameter(CParameter::ChecksumFlag(true))
                .map_err(corrupt)?;
            match &self.dict {
                Some(d) => cctx.ref_cdict(&d.cdict).map_err(corrupt)?,
                None => cctx
                    .set_parameter(CParameter::CompressionLevel(self.level))
                    .map_err(corrupt)?,
            };
            let done = cctx.compress2(&mut out, src).map_err(corrupt);
            // The context keeps no pointer to the dictionary once it is handed back.
            let _ = cctx.reset(zstd_safe::ResetDirective::SessionAndParameters);
            done
        })??;
        Ok((out.len() < src.len()).then_some(out))
    }
}

impl Dictionary {
    fn new(bytes: &[u8], level: i32) -> Result<Dictionary, String> {
        let id = zstd_safe::get_dict_id_from_dict(bytes).ok_or_else(|| {
            "zstd_dict is not a zstd dictionary (make one with fastmc.values.train_zstd_dict or \
             `zstd --train`)"
                .to_string()
        })?;
        let cdict = CDict::try_create(bytes, level)
            .ok_or_else(|| "zstd_dict could not be loaded".to_string())?;
        let ddict =
            DDict::try_create(bytes).ok_or_else(|| "zstd_dict could not be loaded".to_string())?;
        Ok(Dictionary { id, cdict, ddict })
    }
}

fn corrupt(code: zstd_safe::ErrorCode) -> Failure {
    Failure::Corrupt(zstd_safe::get_error_name(code))
}

/// Decompress `src` (one or more zstd frames) to at most `max` bytes, with `dict` when a frame
/// names a dictionary. `max` may be `usize::MAX` (no bound).
pub fn decompress(src: &[u8], max: usize, dict: Option<&Dictionary>) -> Result<Vec<u8>, Failure> {
    let dict = match zstd_safe::get_dict_id_from_frame(src) {
        None => None,
        Some(needed) => match dict {
            Some(d) if d.id == needed => Some(d),
            other => {
                return Err(Failure::Dictionary {
                    needed: needed.get(),
                    have: other.map(Dictionary::id),
                })
            }
        },
    };
    match zstd_safe::find_decompressed_size(src) {
        _ if src.is_empty() => Err(Failure::Corrupt("not zstd frames")),
        Err(_) => Err(Failure::Corrupt("not zstd frames")),
        Ok(Some(n)) if n > max as u64 => Err(Failure::TooLarge { declared: Some(n) }),
        Ok(Some(n)) => one_shot(src, n as usize, dict),
        Ok(None) => streamed(src, max, dict),
    }
}

/// Frames that declare their sizes: decoded at once into a buffer of exactly that size, which
/// zstd never writes past (a frame that holds more than it declared is an error).
fn one_shot(src: &[u8], size: usize, dict: Option<&Dictionary>) -> Result<Vec<u8>, Failure> {
    let mut out = Vec::new();
    out.try_reserve_exact(size)
        .map_err(|_| Failure::Alloc(size))?;
    let n = with_dctx(|dctx| match dict {
        Some(d) => dctx.decompress_using_ddict(&mut out, src, &d.ddict),
        None => dctx.decompress(&mut out, src),
    })?
    .map_err(corrupt)?;
    if n != size {
        return Err(Failure::Corrupt("content size mismatch"));
    }
    Ok(out)
}

/// zstd's name for its error `frameParameter_windowTooLarge` (the window above `WindowLogMax`).
const WINDOW_TOO_LARGE: &str = "Frame requires too much memory for decoding";

/// The first buffer of a frame without a declared size; it doubles up to the bound.
const FIRST_CHUNK: usize = 64 << 10;

/// Frames without a declared size: decoded in steps, the output growing up to `max + 1` bytes
/// (one past the bound proves it too large) and the decoder's window capped (`window_log_max`).
fn streamed(src: &[u8], max: usize, dict: Option<&Dictionary>) -> Result<Vec<u8>, Failure> {
    with_dctx(|dctx| {
        dctx.reset(zstd_safe::ResetDirective::SessionAndParameters)
            .map_err(corrupt)?;
        dctx.set_parameter(DParameter::WindowLogMax(window_log_max(max)))
            .map_err(corrupt)?;
        if let Some(d) = dict {
            dctx.ref_ddict(&d.ddict).map_err(corrupt)?;
        }
        let out = stream_into(dctx, src, max);
        // The context keeps no pointer to the dictionary once it is handed back.
        let _ = dctx.reset(zstd_safe::ResetDirective::SessionAndParameters);
        out
    })?
}

fn stream_into(dctx: &mut DCtx<'static>, src: &[u8], max: usize) -> Result<Vec<u8>, Failure> {
    let limit = max.saturating_add(1);
    let mut out: Vec<u8> = Vec::new();
    let mut input = InBuffer::around(src);
    let mut hint = 1;
    while input.pos() < src.len() || hint != 0 {
        if out.len() == out.capacity() {
            if out.len() >= limit {
                return Err(Failure::TooLarge { declared: None });
            }
            let want = out.len().max(FIRST_CHUNK).min(limit - out.len());
            out.try_reserve_exact(want)
                .map_err(|_| Failure::Alloc(out.len() + want))?;
        }
        let before = (input.pos(), out.len());
        let pos = out.len();
        let mut output = OutBuffer::around_pos(&mut out, pos);
        hint = dctx
            .decompress_stream(&mut output, &mut input)
            .map_err(|code| match zstd_safe::get_error_name(code) {
                WINDOW_TOO_LARGE => Failure::Window,
                _ => corrupt(code),
            })?;
        let stalled = (input.pos(), out.len()) == before && out.len() < out.capacity();
        if stalled {
            // No progress with room to write: the input ends inside a frame.
            return Err(Failure::Corrupt("truncated"));
        }
    }
    if out.len() > max {
        return Err(Failure::TooLarge { declared: None });
    }
    Ok(out)
}

/// The smallest cap on the window: 8 MiB, what streaming compressors use up to level 19, so that
/// a small `max` still reads their frames.
const MIN_WINDOW_LOG: u32 = 23;

/// The largest window a frame may ask the decoder for: enough for any value within `max`, and
/// at least `MIN_WINDOW_LOG`.
fn window_log_max(max: usize) -> u32 {
    let need = usize::BITS - max.saturating_sub(1).leading_zeros();
    need.clamp(MIN_WINDOW_LOG, 31)
}

thread_local! {
    static CCTX: RefCell<Option<CCtx<'static>>> = const { RefCell::new(None) };
    static DCTX: RefCell<Option<DCtx<'static>>> = const { RefCell::new(None) };
}

/// Run `f` with this thread's compression context (made on first use).
fn with_cctx<T>(f: impl FnOnce(&mut CCtx<'static>) -> T) -> Result<T, Failure> {
    CCTX.with(|slot| {
        let Ok(mut slot) = slot.try_borrow_mut() else {
            let mut fresh = CCtx::try_create().ok_or(Failure::Alloc(0))?;
            return Ok(f(&mut fresh));
        };
        if slot.is_none() {
            *slot = Some(CCtx::try_create().ok_or(Failure::Alloc(0))?);
        }
        match slot.as_mut() {
            Some(c) => Ok(f(c)),
            None => Err(Failure::Alloc(0)),
        }
    })
}

/// Run `f` with this thread's decompression context (made on first use).
fn with_dctx<T>(f: impl FnOnce(&mut DCtx<'static>) -> T) -> Result<T, Failure> {
    DCTX.with(|slot| {
        let Ok(mut slot) = slot.try_borrow_mut() else {
            let mut fresh = DCtx::try_create().ok_or(Failure::Alloc(0))?;
            return Ok(f(&mut fresh));
        };
        if slot.is_none() {
            *slot = Some(DCtx::try_create().ok_or(Failure::Alloc(0))?);
        }
        match slot.as_mut() {
            Some(d) => Ok(f(d)),
            None => Err(Failure::Alloc(0)),
        }
    })
}

/// A dictionary of at most `size` bytes trained on `samples` (zstd's trainer; it wants many
/// samples, a hundred or more, of the kind of values it will compress).
pub fn train(samples: &[&[u8]], size: usize) -> Result<Vec<u8>, String> {
    let sizes: Vec<usize> = samples.iter().map(|s| s.len()).collect();
    let joined: Vec<u8> = samples.concat();
    let mut dict = Vec::new();
    dict.try_reserve_exact(size)
        .map_err(|_| format!("cannot allocate a {size}-byte dictionary"))?;
    zstd_safe::train_from_buffer(&mut dict, &joined, &sizes).map_err(|code| {
        format!(
            "zstd could not train a dictionary: {}",
            zstd_safe::get_error_name(code)
        )
    })?;
    Ok(dict)
}

#[cfg(test)]
#[path = "compress_tests.rs"]
mod tests;
