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

/// The secret `given` names for `tenant_id`, as stored: a full name or ARN under the
/// tenant's prefix as it is, or a name relative to that prefix (`openai/prod` for
/// `warden/managed/<tenant_id>/openai/prod`), since a user seldom knows the tenant id.
/// `None` when it would leave the tenant's prefix (`../`, another tenant's path).
pub fn resolve_secret_ref(tenant_id: &str, given: &str) -> Option<String> {
    if given.starts_with(SECRET_PREFIX) || given.starts_with("arn:") {
        return is_tenant_secret_ref(tenant_id, given).then(|| given.to_owned());
    }
    let full = format!("{SECRET_PREFIX}{tenant_id}/{given}");
    is_tenant_secret_ref(tenant_id, &full).then_some(full)
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
    use super::{is_tenant_secret_ref, resolve_secret_ref};

    #[test]
    fn a_relative_name_lands_under_the_tenants_prefix_and_cannot_leave_it() {
        let t = "ten_01ABC";
        assert_eq!(
            resolve_secret_ref(t, "openai/prod").as_deref(),
            Some("warden/managed/ten_01ABC/openai/prod")
        );
        assert_eq!(
            resolve_secret_ref(t, "warden/managed/ten_01ABC/openai").as_deref(),
            Some("warden/managed/ten_01ABC/openai")
        );
        for escape in [
            "../ten_02XYZ/openai",
            "a/../../x",
            "warden/managed/ten_02XYZ/openai",
            "",
            "a b",
        ] {
            assert_eq!(resolve_secret_ref(t, escape), None, "{escape}");
        }
    }

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
