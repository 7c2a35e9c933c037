//! The state file's encoding: a writer and a bounded reader of its fields.

use super::{StateError, StateErrorKind};

/// Builds a state file's octets: little-endian integers, strings as a u32 length and
/// their octets.
pub(super) struct Writer(pub(super) Vec<u8>);

impl Writer {
    /// Appends `v`.
    pub(super) fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    /// Appends `v`, little-endian.
    pub(super) fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    /// Appends `v`, little-endian.
    pub(super) fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    /// Appends `v`, little-endian.
    pub(super) fn i64(&mut self, v: i64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    /// Appends `v` after its length (a little-endian `u32`).
    pub(super) fn bytes(&mut self, v: &[u8]) {
        self.u32(v.len().min(u32::MAX as usize) as u32);
        self.0
            .extend_from_slice(&v[..v.len().min(u32::MAX as usize)]);
    }
}

/// Reads a state file's octets back; running out is a `Format` error, never a panic.
pub(super) struct Reader<'a> {
    /// What is left to read.
    pub(super) rest: &'a [u8],
}

impl<'a> Reader<'a> {
    /// The next `n` octets, or a truncation error.
    pub(super) fn take(&mut self, n: usize) -> Result<&'a [u8], StateError> {
        if self.rest.len() < n {
            return Err(StateError::new(StateErrorKind::Format, "truncated"));
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }
    /// The next `N` octets as an array.
    pub(super) fn array<const N: usize>(&mut self) -> Result<[u8; N], StateError> {
        let mut out = [0; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }
    /// Reads one octet.
    pub(super) fn u8(&mut self) -> Result<u8, StateError> {
        Ok(self.take(1)?[0])
    }
    /// Reads a little-endian `u32`.
    pub(super) fn u32(&mut self) -> Result<u32, StateError> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    /// Reads a little-endian `u64`.
    pub(super) fn u64(&mut self) -> Result<u64, StateError> {
        Ok(u64::from_le_bytes(self.array()?))
    }
    /// Reads a little-endian `i64`.
    pub(super) fn i64(&mut self) -> Result<i64, StateError> {
        Ok(i64::from_le_bytes(self.array()?))
    }
    /// Reads octets written with their length.
    pub(super) fn bytes(&mut self) -> Result<&'a [u8], StateError> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    /// Reads UTF-8 text written with its length.
    pub(super) fn string(&mut self) -> Result<String, StateError> {
        String::from_utf8(self.bytes()?.to_vec())
            .map_err(|_| StateError::new(StateErrorKind::Format, "not UTF-8"))
    }
}
