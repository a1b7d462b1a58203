//! Protobuf's wire format: tags, varints, length-delimited and fixed-width fields, each
//! appended to a buffer; and the lengths of fields, counted before they are written.

/// Protobuf wire types.
pub(super) const VARINT: u8 = 0;
pub(super) const FIXED64: u8 = 1;
pub(super) const LEN: u8 = 2;
pub(super) const FIXED32: u8 = 5;

/// The length of a length-delimited field of a one-byte tag whose body is `body` long.
pub(super) fn delimited_len(body: usize) -> usize {
    1 + varint_len(body as u64) + body
}

/// The length of a string field of a one-byte tag as [`string`] writes it: none when
/// empty.
pub(super) fn string_len(value: &str) -> usize {
    if value.is_empty() {
        0
    } else {
        delimited_len(value.len())
    }
}

pub(super) fn varint_len(value: u64) -> usize {
    // 7 bits a byte; 0 takes one.
    (64 - (value | 1).leading_zeros() as usize).div_ceil(7)
}

/// A length-delimited field whose body `write` appends: the body is written where it
/// goes and its length moved in front of it.
pub(super) fn message(b: &mut Vec<u8>, field: u32, write: impl FnOnce(&mut Vec<u8>)) {
    key(b, field, LEN);
    let start = b.len();
    write(b);
    let len = b.len() - start;
    let mut prefix = [0u8; 10];
    let n = varint_into(&mut prefix, len as u64);
    b.extend_from_slice(&prefix[..n]);
    b[start..].rotate_right(n);
}

#[inline(always)]
pub(super) fn key(b: &mut Vec<u8>, field: u32, wire_type: u8) {
    varint(b, (u64::from(field) << 3) | u64::from(wire_type));
}

/// A string field, left out when empty (proto3's default).
pub(super) fn string(b: &mut Vec<u8>, field: u32, value: &str) {
    if !value.is_empty() {
        string_always(b, field, value);
    }
}

/// A string field even when empty: a member of a `oneof` says which member it is.
pub(super) fn string_always(b: &mut Vec<u8>, field: u32, value: &str) {
    bytes(b, field, value.as_bytes());
}

pub(super) fn bytes(b: &mut Vec<u8>, field: u32, value: &[u8]) {
    key(b, field, LEN);
    varint(b, value.len() as u64);
    b.extend_from_slice(value);
}

/// An unsigned integer (or enum) field, left out when zero.
pub(super) fn uint(b: &mut Vec<u8>, field: u32, value: u64) {
    if value != 0 {
        key(b, field, VARINT);
        varint(b, value);
    }
}

pub(super) fn fixed64(b: &mut Vec<u8>, field: u32, value: u64) {
    if value != 0 {
        key(b, field, FIXED64);
        b.extend_from_slice(&value.to_le_bytes());
    }
}

pub(super) fn fixed32(b: &mut Vec<u8>, field: u32, value: u32) {
    if value != 0 {
        key(b, field, FIXED32);
        b.extend_from_slice(&value.to_le_bytes());
    }
}

/// Inlined, so that a constant tag or a short length is one push rather than a call: a
/// span's encoding 4,528 -> 4,327 instructions (`instructions.sh LOAD=plain TRACED=1`,
/// 2026-12-06).
#[inline(always)]
pub(super) fn varint(b: &mut Vec<u8>, value: u64) {
    // Tags and most lengths take one byte; a span's length, an HTTP status and most
    // token counts two (the call for them cost a span 158 instructions, 2026-12-06).
    if value < 0x80 {
        b.push(value as u8);
    } else if value < 0x4000 {
        b.extend_from_slice(&[(value as u8) | 0x80, (value >> 7) as u8]);
    } else {
        long_varint(b, value);
    }
}

#[inline(never)]
fn long_varint(b: &mut Vec<u8>, value: u64) {
    let mut buf = [0u8; 10];
    let n = varint_into(&mut buf, value);
    b.extend_from_slice(&buf[..n]);
}

pub(super) fn varint_into(buf: &mut [u8; 10], mut value: u64) -> usize {
    let mut n = 0;
    while value >= 0x80 {
        buf[n] = (value as u8) | 0x80;
        value >>= 7;
        n += 1;
    }
    buf[n] = value as u8;
    n + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_are_written_and_counted_as_protobuf_writes_them() {
        for value in [
            0,
            1,
            127,
            128,
            200,
            16_383,
            16_384,
            u64::from(u32::MAX),
            u64::MAX,
        ] {
            let mut written = Vec::new();
            varint(&mut written, value);
            assert_eq!(varint_len(value), written.len(), "{value}");
            let mut reference = Vec::new();
            prost::encoding::encode_varint(value, &mut reference);
            assert_eq!(reference, written, "{value}");
        }
    }
}
