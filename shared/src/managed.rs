//! References to managed provider keys in AWS Secrets Manager (spec 2.17).
//!
//! Warden stores only the name of a secret, never its value. Names live under a fixed
//! prefix and, below it, the tenant's own id (`warden/managed/<tenant_id>/...`), so one
//! tenant can never point the proxy at another tenant's secret, and an operator can grant
//! the proxy's IAM role read access to exactly `warden/managed/*`.

/// The fixed path prefix every managed secret name starts with.
pub const SECRET_PREFIX: &str = "warden/managed/";

/// Whether `secret_ref` names a secret of `tenant_id`: a secret name
/// `warden/managed/<tenant_id>/<rest>`, or the ARN of such a secret. `<rest>` is 1 to 200
/// characters of those AWS allows in secret names (letters, digits, `/_+=.@-`).
pub fn is_tenant_secret_ref(tenant_id: &str, secret_ref: &str) -> bool {
    let name = secret_name(secret_ref);
    let Some(rest) = name
        .strip_prefix(SECRET_PREFIX)
        .and_then(|rest| rest.strip_prefix(tenant_id))
        .and_then(|rest| rest.strip_prefix('/'))
    else {
        return false;
    };
    (1..=200).contains(&rest.len())
        && rest
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/_+=.@-".contains(&b))
        && !rest
            .split('/')
            .any(|part| part.is_empty() || part == "." || part == "..")
}

/// The secret name inside an ARN (`arn:aws:secretsmanager:<region>:<account>:secret:<name>`),
/// or `secret_ref` itself.
fn secret_name(secret_ref: &str) -> &str {
    let mut parts = secret_ref.splitn(7, ':');
    match (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.nth(2),
        parts.next(),
    ) {
        (Some("arn"), Some(_), Some("secretsmanager"), Some("secret"), Some(name)) => name,
        _ => secret_ref,
    }
}

#[cfg(test)]
mod tests {
    use super::is_tenant_secret_ref;

    #[test]
    fn only_the_tenants_own_prefix_is_accepted() {
        let t = "ten_01ABC";
        assert!(is_tenant_secret_ref(t, "warden/managed/ten_01ABC/openai"));
        assert!(is_tenant_secret_ref(
            t,
            "arn:aws:secretsmanager:eu-west-1:123456789012:secret:warden/managed/ten_01ABC/openai-AbCdEf"
        ));
        assert!(!is_tenant_secret_ref(
            t,
            "warden/managed/ten_01OTHER/openai"
        ));
        assert!(!is_tenant_secret_ref(t, "warden/managed/ten_01ABCD/openai"));
        assert!(!is_tenant_secret_ref(t, "warden/managed/ten_01ABC/"));
        assert!(!is_tenant_secret_ref(
            t,
            "warden/managed/ten_01ABC/../ten_02/x"
        ));
        assert!(!is_tenant_secret_ref(t, "prod/openai"));
        assert!(!is_tenant_secret_ref(t, "warden/managed/ten_01ABC/a b"));
        assert!(!is_tenant_secret_ref(
            t,
            "arn:aws:secretsmanager:eu-west-1:123456789012:secret:prod/openai"
        ));
    }
}
