//! What may stand in an HTTP header the proxy writes. Credentials come from the
//! configuration and from Secrets Manager and go into the provider's request head; each
//! source checks them here when it takes them, and the head's writer once more.

/// Whether `value` may stand in a header as it is: visible ASCII, spaces and tabs, and
/// bytes above ASCII (what `http::HeaderValue` accepts); no line breaks.
pub fn is_header_value(value: &[u8]) -> bool {
    value
        .iter()
        .all(|&b| b == b'\t' || (b >= 0x20 && b != 0x7f))
}
