//! The SAML service provider, through `samael` and xmlsec: the SP's metadata, the
//! AuthnRequest a login starts with (HTTP-Redirect binding), and the validation of the
//! IdP's response at the assertion consumer service (HTTP-POST binding).
//!
//! Validation works only on what the IdP signed: xmlsec verifies the signature against
//! the configured certificate and `samael` keeps only the signed element, so content
//! wrapped beside or around it (XML signature wrapping) is never read. Before any XML
//! parser sees the document it is refused when it carries a DOCTYPE (entities, external
//! or not), a comment (`user@evil.com<!---->.victim.com` verifies, because canonical XML
//! drops comments, and a parser may read only the text before it) or a processing
//! instruction.

use base64::Engine;
use chrono::Duration;
use samael::crypto::AllowedSignatureAlgorithm;
use samael::key_info::{KeyInfo, X509Data};
use samael::metadata::{
    Endpoint, EntityDescriptor, IdpSsoDescriptor, IndexedEndpoint, KeyDescriptor, NameIdFormat,
    SpSsoDescriptor, HTTP_POST_BINDING, HTTP_REDIRECT_BINDING,
};
use samael::schema::Assertion;
use samael::service_provider::ServiceProvider;
use samael::traits::ToXml;

use crate::validate::Email;

/// The name id format Warden asks for and reads (spec 5.9): the user's email.
pub const NAME_ID_FORMAT: &str = "urn:oasis:names:tc:SAML:1.1:nameid-format:emailAddress";

/// The largest `SAMLResponse` accepted, base64 as posted.
pub const MAX_RESPONSE_BYTES: usize = 256 * 1024;

/// How far the IdP's clock may be from Warden's.
const CLOCK_SKEW_SECS: i64 = 60;

/// The service provider of one tenant, as the IdP knows it.
#[derive(Debug, Clone)]
pub struct SpUrls {
    pub entity_id: String,
    pub acs_url: String,
}

impl SpUrls {
    /// A tenant's SP under Warden's public URL (`auth.public_url`): its entity id is its
    /// metadata's address, the common convention IdPs import from.
    pub fn of_tenant(public_url: &str, tenant_id: &str) -> SpUrls {
        let base = format!(
            "{}/api/v1/sso/{tenant_id}",
            public_url.trim_end_matches('/')
        );
        SpUrls {
            entity_id: format!("{base}/saml/metadata"),
            acs_url: format!("{base}/saml/acs"),
        }
    }
}

/// The IdP as a tenant configured it.
pub struct Idp<'a> {
    pub entity_id: &'a str,
    pub sso_url: &'a str,
    /// The signing certificate, DER.
    pub certificate_der: &'a [u8],
}

/// The SP's metadata as SAML XML, for the IdP to import.
pub fn sp_metadata(sp: &SpUrls) -> Result<String, String> {
    let descriptor = SpSsoDescriptor {
        protocol_support_enumeration: Some("urn:oasis:names:tc:SAML:2.0:protocol".to_owned()),
        name_id_formats: Some(vec![NAME_ID_FORMAT.to_owned()]),
        authn_requests_signed: Some(false),
        want_assertions_signed: Some(true),
        assertion_consumer_services: vec![IndexedEndpoint {
            binding: HTTP_POST_BINDING.to_owned(),
            location: sp.acs_url.clone(),
            response_location: None,
            index: 0,
            is_default: Some(true),
        }],
        ..SpSsoDescriptor::default()
    };
    let entity = EntityDescriptor {
        entity_id: Some(sp.entity_id.clone()),
        sp_sso_descriptors: Some(vec![descriptor]),
        ..EntityDescriptor::default()
    };
    entity.to_string().map_err(|e| e.to_string())
}

/// A new AuthnRequest to `idp`: its id (kept to match the response's `InResponseTo`) and
/// the URL the browser is sent to (HTTP-Redirect binding, with `relay_state`).
pub fn authn_request(
    sp: &SpUrls,
    idp: &Idp<'_>,
    request_id: &str,
    relay_state: &str,
) -> Result<String, String> {
    let provider = service_provider(sp, idp);
    let mut request = provider
        .make_authentication_request(idp.sso_url)
        .map_err(|e| e.to_string())?;
    request.id = request_id.to_owned();
    let url = request
        .redirect(relay_state)
        .map_err(|e| e.to_string())?
        .ok_or("the AuthnRequest has no destination")?;
    Ok(url.to_string())
}

/// What a valid response says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedLogin {
    /// The email name id, lowercased.
    pub email: String,
    pub assertion_id: String,
    /// The AuthnRequest the assertion answers.
    pub in_response_to: String,
    /// Until when the assertion could be presented (for the replay record), Unix ms.
    pub valid_until_ms: i64,
}

/// Why a response is refused: said to the client as it is (no secrets in it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused(pub String);

/// Validates a posted `SAMLResponse` (base64) for `sp` against `idp`: signature by the
/// configured certificate (RSA or ECDSA with SHA-256 or stronger), issuer, destination,
/// audience, recipient, validity window (with a minute of skew) and that it answers one
/// of `pending_requests`. Replay of the assertion id is the caller's to check.
pub fn verify_response(
    sp: &SpUrls,
    idp: &Idp<'_>,
    saml_response: &str,
    pending_requests: &[&str],
) -> Result<VerifiedLogin, Refused> {
    if saml_response.len() > MAX_RESPONSE_BYTES {
        return Err(Refused("the SAMLResponse is too large".into()));
    }
    let compact: String = saml_response.split_ascii_whitespace().collect();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(compact)
        .map_err(|_| Refused("the SAMLResponse is not base64".into()))?;
    let xml =
        String::from_utf8(bytes).map_err(|_| Refused("the SAMLResponse is not UTF-8".into()))?;
    refuse_dangerous_markup(&xml)?;
    // Only what is signed is read, but a response carrying a second assertion beside or
    // around the signed one (signature wrapping) is hostile: refused outright.
    if count_elements(&xml, "Assertion") != 1 {
        return Err(Refused(
            "a SAML response must carry exactly one assertion".into(),
        ));
    }
    // The protocol message names where the IdP meant it to go (SAML bindings 3.5.5.2).
    // samael checks it only on a signed Response; IdPs often sign the assertion alone.
    if root_attribute(&xml, "Destination").as_deref() != Some(sp.acs_url.as_str()) {
        return Err(Refused(format!(
            "the response's Destination must be this service provider's ACS URL ({})",
            sp.acs_url
        )));
    }
    let provider = service_provider(sp, idp);
    let assertion = provider
        .parse_xml_response(&xml, Some(pending_requests))
        .map_err(|error| Refused(format!("the SAML response is not valid: {error}")))?;
    login_of(&assertion)
}

/// DOCTYPE (and so entities), comments and processing instructions, refused before any
/// parser reads the document. An XML declaration at the very start is allowed.
fn refuse_dangerous_markup(xml: &str) -> Result<(), Refused> {
    let body = xml.trim_start_matches('\u{feff}').trim_start();
    let body = if body.starts_with("<?xml") {
        body.find("?>").map_or("", |end| &body[end + 2..])
    } else {
        body
    };
    let upper = body.to_ascii_uppercase();
    if upper.contains("<!DOCTYPE") || upper.contains("<!ENTITY") {
        return Err(Refused(
            "a SAML response may not carry a DOCTYPE or entities".into(),
        ));
    }
    if body.contains("<!--") {
        return Err(Refused("a SAML response may not carry XML comments".into()));
    }
    if body.contains("<?") {
        return Err(Refused(
            "a SAML response may not carry processing instructions".into(),
        ));
    }
    Ok(())
}

/// The value of the root element's attribute `name` (no prefix), XML-unescaped only for
/// the five predefined entities.
fn root_attribute(xml: &str, name: &str) -> Option<String> {
    let start = xml
        .split('<')
        .skip(1)
        .find(|tag| !tag.starts_with(['?', '!']))?;
    let head = start.split('>').next()?;
    let needle = format!("{name}=");
    let mut rest = head;
    while let Some(at) = rest.find(&needle) {
        let preceded_by_space = rest[..at].ends_with(|c: char| c.is_ascii_whitespace());
        let value = &rest[at + needle.len()..];
        let quote = value.chars().next()?;
        if preceded_by_space && matches!(quote, '"' | '\'') {
            let value = &value[1..];
            let end = value.find(quote)?;
            return Some(
                value[..end]
                    .replace("&lt;", "<")
                    .replace("&gt;", ">")
                    .replace("&quot;", "\"")
                    .replace("&apos;", "'")
                    .replace("&amp;", "&"),
            );
        }
        rest = &rest[at + needle.len()..];
    }
    None
}

/// How many elements named `local_name` (in any namespace prefix) the document opens.
fn count_elements(xml: &str, local_name: &str) -> usize {
    xml.split('<')
        .skip(1)
        .filter(|tag| {
            let name = tag
                .split(|c: char| c.is_ascii_whitespace() || c == '>' || c == '/')
                .next()
                .unwrap_or_default();
            let local = name.rsplit(':').next().unwrap_or_default();
            !name.starts_with(['/', '!', '?']) && local == local_name
        })
        .count()
}

/// The login an already validated assertion grants.
fn login_of(assertion: &Assertion) -> Result<VerifiedLogin, Refused> {
    let subject = assertion
        .subject
        .as_ref()
        .ok_or_else(|| Refused("the assertion has no subject".into()))?;
    let name_id = subject
        .name_id
        .as_ref()
        .ok_or_else(|| Refused("the assertion names no user".into()))?;
    if name_id
        .format
        .as_deref()
        .is_some_and(|f| f != NAME_ID_FORMAT)
    {
        return Err(Refused(format!(
            "the name id must be an email address ({NAME_ID_FORMAT})"
        )));
    }
    // The same rules as every email Warden takes (signup, owners): users match by it.
    let email = Email::try_from(name_id.value.clone())
        .map_err(|_| Refused("the name id is not an email address".into()))?
        .as_str()
        .to_owned();
    let confirmation = subject
        .subject_confirmations
        .iter()
        .flatten()
        .filter_map(|c| c.subject_confirmation_data.as_ref())
        .find(|data| data.in_response_to.is_some())
        .ok_or_else(|| Refused("the assertion answers no request".into()))?;
    let in_response_to = confirmation.in_response_to.clone().unwrap_or_default();
    let valid_until = confirmation
        .not_on_or_after
        .or_else(|| {
            assertion
                .conditions
                .as_ref()
                .and_then(|c| c.not_on_or_after)
        })
        .ok_or_else(|| Refused("the assertion does not say until when it is valid".into()))?;
    Ok(VerifiedLogin {
        email,
        assertion_id: assertion.id.clone(),
        in_response_to,
        valid_until_ms: (valid_until + Duration::seconds(CLOCK_SKEW_SECS)).timestamp_millis(),
    })
}

fn service_provider(sp: &SpUrls, idp: &Idp<'_>) -> ServiceProvider {
    let certificate = base64::engine::general_purpose::STANDARD.encode(idp.certificate_der);
    let idp_metadata = EntityDescriptor {
        entity_id: Some(idp.entity_id.to_owned()),
        idp_sso_descriptors: Some(vec![IdpSsoDescriptor {
            id: None,
            valid_until: None,
            cache_duration: None,
            protocol_support_enumeration: Some("urn:oasis:names:tc:SAML:2.0:protocol".to_owned()),
            error_url: None,
            signature: None,
            key_descriptors: vec![KeyDescriptor {
                key_use: Some("signing".to_owned()),
                key_info: KeyInfo {
                    id: None,
                    x509_data: Some(X509Data {
                        certificates: vec![certificate],
                    }),
                },
                encryption_methods: None,
            }],
            organization: None,
            contact_people: Vec::new(),
            artifact_resolution_service: Vec::new(),
            single_logout_services: Vec::new(),
            manage_name_id_services: Vec::new(),
            name_id_formats: vec![NAME_ID_FORMAT.to_owned()],
            want_authn_requests_signed: None,
            single_sign_on_services: vec![Endpoint {
                binding: HTTP_REDIRECT_BINDING.to_owned(),
                location: idp.sso_url.to_owned(),
                response_location: None,
            }],
            name_id_mapping_services: Vec::new(),
            assertion_id_request_services: Vec::new(),
            attribute_profiles: Vec::new(),
            attributes: Vec::new(),
        }]),
        ..EntityDescriptor::default()
    };
    ServiceProvider {
        entity_id: Some(sp.entity_id.clone()),
        metadata_url: Some(sp.entity_id.clone()),
        acs_url: Some(sp.acs_url.clone()),
        slo_url: None,
        idp_metadata,
        authn_name_id_format: Some(NameIdFormat::EmailAddressNameIDFormat.value().to_owned()),
        allow_idp_initiated: false,
        max_clock_skew: Duration::seconds(CLOCK_SKEW_SECS),
        max_issue_delay: Duration::seconds(300),
        allowed_signature_algorithms: Some(vec![
            AllowedSignatureAlgorithm::RsaSha256,
            AllowedSignatureAlgorithm::RsaSha384,
            AllowedSignatureAlgorithm::RsaSha512,
            AllowedSignatureAlgorithm::EcdsaSha256,
            AllowedSignatureAlgorithm::EcdsaSha384,
            AllowedSignatureAlgorithm::EcdsaSha512,
        ]),
        ..ServiceProvider::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dangerous_markup_is_refused_before_parsing() {
        for xml in [
            "<!DOCTYPE r [<!ENTITY x SYSTEM \"file:///etc/passwd\">]><r>&x;</r>",
            "<?xml version=\"1.0\"?><!doctype r><r/>",
            "<r><NameID>user@evil.com<!---->.victim.com</NameID></r>",
            "<r><?evil?></r>",
        ] {
            assert!(refuse_dangerous_markup(xml).is_err(), "{xml}");
        }
        assert!(refuse_dangerous_markup("<?xml version=\"1.0\" encoding=\"UTF-8\"?><r/>").is_ok());
    }

    #[test]
    fn assertions_are_counted_in_any_prefix() {
        let two = "<samlp:Response><saml:Assertion ID=\"a\"/><Assertion>\
                   <saml:Advice><saml2:Assertion></saml2:Assertion></saml:Advice>\
                   </Assertion></samlp:Response>";
        assert_eq!(count_elements(two, "Assertion"), 3);
        assert_eq!(count_elements("<r><saml:AssertionX/></r>", "Assertion"), 0);
    }

    #[test]
    fn the_root_destination_is_read_exactly() {
        let xml = "<?xml version=\"1.0\"?><samlp:Response ID=\"r\" \
                   Destination='https://sp/acs?a=1&amp;b=2' xDestination=\"x\"><a Destination=\"no\"/>";
        assert_eq!(
            root_attribute(xml, "Destination").as_deref(),
            Some("https://sp/acs?a=1&b=2")
        );
        assert_eq!(
            root_attribute("<r xDestination=\"x\"/>", "Destination"),
            None
        );
    }

    #[test]
    fn only_plain_emails_name_a_user() {
        let is_plain_email = |text: &str| Email::try_from(text.to_owned()).is_ok();
        assert!(is_plain_email("ada@example.com"));
        for bad in [
            "ada",
            "@example.com",
            "ada@example",
            "a@b@c.com",
            "a b@c.com",
            "a@.com",
        ] {
            assert!(!is_plain_email(bad), "{bad}");
        }
    }

    #[test]
    fn metadata_names_the_acs_and_the_email_format() {
        let sp = SpUrls::of_tenant("https://warden.example.com/", "ten_1");
        assert_eq!(
            sp.acs_url,
            "https://warden.example.com/api/v1/sso/ten_1/saml/acs"
        );
        let xml = sp_metadata(&sp).expect("metadata");
        assert!(
            xml.contains(&sp.acs_url) && xml.contains(NAME_ID_FORMAT),
            "{xml}"
        );
        assert!(
            xml.contains("entityID=\"https://warden.example.com/api/v1/sso/ten_1/saml/metadata\"")
        );
    }
}
