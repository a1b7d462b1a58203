//! The checks that tell a real card number, IBAN or generic secret from digits and words
//! that only look like one.

/// The Luhn checksum of a card number's digits (ISO/IEC 7812).
pub fn luhn(digits: &[u8]) -> bool {
    let mut sum = 0u32;
    for (index, digit) in digits.iter().rev().enumerate() {
        let mut value = u32::from(digit - b'0');
        if index % 2 == 1 {
            value *= 2;
            if value > 9 {
                value -= 9;
            }
        }
        sum += value;
    }
    sum % 10 == 0
}

/// Whether `digits` (13 to 19) start as a card scheme's numbers do: Visa, Mastercard,
/// American Express, Discover, JCB, Diners Club, UnionPay.
pub fn card_prefix(digits: &[u8]) -> bool {
    let prefix = |n: usize| -> u32 {
        digits[..n]
            .iter()
            .fold(0, |acc, d| acc * 10 + u32::from(d - b'0'))
    };
    if !(13..=19).contains(&digits.len()) {
        return false;
    }
    let two = prefix(2);
    let four = prefix(4);
    digits[0] == b'4'
        || (51..=55).contains(&two)
        || (2221..=2720).contains(&four)
        || two == 34
        || two == 37
        || four == 6011
        || two == 65
        || (3528..=3589).contains(&four)
        || two == 36
        || (300..=305).contains(&prefix(3))
        || two == 62
}

/// The ISO 13616 check of an IBAN (letters and digits, no spaces): its country's length
/// where known, and the remainder 1 modulo 97 of its rearranged digits.
pub fn iban(text: &[u8]) -> bool {
    if !(15..=34).contains(&text.len()) {
        return false;
    }
    let country = &text[..2];
    if let Some(length) = iban_length(country) {
        if text.len() != length {
            return false;
        }
    }
    let mut remainder = 0u32;
    for &byte in text[4..].iter().chain(&text[..4]) {
        let value = match byte {
            b'0'..=b'9' => u32::from(byte - b'0'),
            b'A'..=b'Z' => u32::from(byte - b'A') + 10,
            _ => return false,
        };
        remainder = if value >= 10 {
            (remainder * 100 + value) % 97
        } else {
            (remainder * 10 + value) % 97
        };
    }
    remainder == 1
}

/// The IBAN length of the countries most IBANs come from.
fn iban_length(country: &[u8]) -> Option<usize> {
    Some(match country {
        b"DE" => 22,
        b"GB" | b"IE" => 22,
        b"FR" | b"IT" | b"MC" => 27,
        b"ES" | b"SE" | b"SK" | b"CZ" => 24,
        b"NL" => 18,
        b"BE" => 16,
        b"AT" | b"LU" | b"EE" | b"LT" => 20,
        b"CH" | b"LI" | b"LV" => 21,
        b"PL" | b"HU" | b"CY" => 28,
        b"PT" => 25,
        b"DK" | b"FI" | b"FO" | b"GL" => 18,
        b"NO" => 15,
        _ => return None,
    })
}

/// Shannon entropy of `text` in bits per character: random tokens score high, words
/// and repeated characters low.
pub fn entropy(text: &str) -> f64 {
    let mut counts = [0u32; 256];
    for byte in text.bytes() {
        counts[usize::from(byte)] += 1;
    }
    let length = text.len() as f64;
    counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = f64::from(c) / length;
            -p * p.log2()
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn card_numbers_pass_luhn_and_their_scheme_and_others_do_not() {
        assert!(luhn(b"4111111111111111") && card_prefix(b"4111111111111111"));
        assert!(luhn(b"5555555555554444") && card_prefix(b"5555555555554444"));
        assert!(luhn(b"378282246310005") && card_prefix(b"378282246310005"));
        assert!(!luhn(b"4111111111111112"));
        // Luhn-valid but no card scheme's.
        assert!(luhn(b"0000000000000000") && !card_prefix(b"0000000000000000"));
    }

    #[test]
    fn ibans_pass_mod_97_and_their_countrys_length() {
        assert!(iban(b"DE89370400440532013000"));
        assert!(iban(b"GB82WEST12345698765432"));
        assert!(!iban(b"DE89370400440532013001"));
        assert!(!iban(b"DE8937040044053201300"));
    }

    #[test]
    fn random_tokens_have_more_entropy_than_words() {
        assert!(entropy("Zx8Kq2LmV9pR4tYw7Hn3") > 4.0);
        assert!(entropy("changemechangeme") < 3.0);
        assert!(entropy("aaaaaaaaaaaaaaaa") < 0.1);
    }
}
