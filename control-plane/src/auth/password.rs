//! Password hashing with argon2id, off the async runtime's worker threads.

use std::sync::OnceLock;

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;

use crate::error::ApiError;

/// Hashes `password` into a PHC string (argon2id, the crate's recommended parameters).
pub async fn hash(password: String) -> Result<String, ApiError> {
    tokio::task::spawn_blocking(move || {
        let salt = SaltString::generate(&mut rand::rngs::OsRng);
        Argon2::default()
            .hash_password(password.as_bytes(), &salt)
            .map(|hash| hash.to_string())
            .map_err(|error| ApiError::internal(format_args!("password hashing: {error}")))
    })
    .await
    .map_err(ApiError::internal)?
}

/// Checks `password` against `stored`; with `None` it verifies against a fixed dummy
/// hash, so that an unknown email costs the same time as a wrong password.
pub async fn verify(password: String, stored: Option<String>) -> Result<bool, ApiError> {
    tokio::task::spawn_blocking(move || {
        let stored = match stored {
            Some(stored) => stored,
            None => {
                let _ = check(&password, dummy_hash());
                return false;
            }
        };
        check(&password, &stored)
    })
    .await
    .map_err(ApiError::internal)
}

fn check(password: &str, stored: &str) -> bool {
    PasswordHash::new(stored).is_ok_and(|parsed| {
        Argon2::default()
            .verify_password(password.as_bytes(), &parsed)
            .is_ok()
    })
}

fn dummy_hash() -> &'static str {
    static DUMMY: OnceLock<String> = OnceLock::new();
    DUMMY.get_or_init(|| {
        let salt = SaltString::generate(&mut rand::rngs::OsRng);
        Argon2::default()
            .hash_password(b"warden-timing-equaliser", &salt)
            .map(|hash| hash.to_string())
            .unwrap_or_default()
    })
}
