"""A SAML identity provider for Warden's SSO tests: real key pairs (cryptography) and
real XML signatures (signxml, exclusive C14N, RSA-SHA256), answering the AuthnRequest
Warden redirected to it. Each `variant` is a response an attacker or a broken IdP could
post; `valid` is the one a working IdP sends.

    python idp.py keypair DIR NAME [--expired]
    python idp.py respond JSON   (prints the base64 SAMLResponse)
"""

import base64
import datetime
import json
import sys
import urllib.parse
import uuid
import zlib
from copy import deepcopy

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID
from lxml import etree
from signxml import XMLSigner

SAMLP = "urn:oasis:names:tc:SAML:2.0:protocol"
SAML = "urn:oasis:names:tc:SAML:2.0:assertion"
DS = "http://www.w3.org/2000/09/xmldsig#"
EMAIL_FORMAT = "urn:oasis:names:tc:SAML:1.1:nameid-format:emailAddress"


def keypair(folder, name, expired=False):
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    now = datetime.datetime.now(datetime.timezone.utc)
    start, end = (now - datetime.timedelta(days=30), now - datetime.timedelta(days=1)) if expired \
        else (now - datetime.timedelta(days=1), now + datetime.timedelta(days=365))
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"test idp {name}")])
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(end).sign(key, hashes.SHA256()))
    with open(f"{folder}/{name}.key.pem", "wb") as out:
        out.write(key.private_bytes(serialization.Encoding.PEM,
                                    serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()))
    with open(f"{folder}/{name}.cert.pem", "wb") as out:
        out.write(cert.public_bytes(serialization.Encoding.PEM))


def authn_request(redirect_url):
    """The AuthnRequest of Warden's HTTP-Redirect: its id, ACS URL and issuer."""
    query = urllib.parse.parse_qs(urllib.parse.urlparse(redirect_url).query)
    xml = zlib.decompress(base64.b64decode(query["SAMLRequest"][0]), -15)
    root = etree.fromstring(xml)
    issuer = root.find(f"{{{SAML}}}Issuer").text
    return root.get("ID"), root.get("AssertionConsumerServiceURL"), issuer


def instant(moment):
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def build(args, request_id, acs_url, audience, now):
    """The Response document (unsigned) and its assertion's id."""
    variant = args["variant"]
    assertion_id = "_a" + uuid.uuid4().hex
    not_before = now - datetime.timedelta(minutes=1)
    not_after = now + datetime.timedelta(minutes=5)
    issued = now
    if variant == "expired":
        issued = now - datetime.timedelta(hours=2)
        not_before, not_after = issued, issued + datetime.timedelta(minutes=5)
    if variant == "not_yet_valid":
        not_before = now + datetime.timedelta(hours=1)
        not_after = now + datetime.timedelta(hours=2)
    destination = acs_url if variant != "wrong_destination" else acs_url + "-elsewhere"
    audience = audience if variant != "wrong_audience" else "https://other-sp.example.com"
    issuer = args["idp_entity_id"] if variant != "wrong_issuer" else "https://evil-idp.example.com"
    email = args["email"]
    response = etree.Element(f"{{{SAMLP}}}Response", nsmap={"samlp": SAMLP, "saml": SAML},
                             ID="_r" + uuid.uuid4().hex, Version="2.0",
                             IssueInstant=instant(issued), Destination=destination,
                             InResponseTo=request_id)
    etree.SubElement(response, f"{{{SAML}}}Issuer").text = issuer
    status = etree.SubElement(response, f"{{{SAMLP}}}Status")
    etree.SubElement(status, f"{{{SAMLP}}}StatusCode",
                     Value="urn:oasis:names:tc:SAML:2.0:status:Success")
    assertion = etree.SubElement(response, f"{{{SAML}}}Assertion", ID=assertion_id,
                                 Version="2.0", IssueInstant=instant(issued))
    etree.SubElement(assertion, f"{{{SAML}}}Issuer").text = issuer
    etree.SubElement(assertion, f"{{{DS}}}Signature", Id="placeholder", nsmap={"ds": DS})
    subject = etree.SubElement(assertion, f"{{{SAML}}}Subject")
    name_id = etree.SubElement(subject, f"{{{SAML}}}NameID", Format=EMAIL_FORMAT)
    name_id.text = email
    confirmation = etree.SubElement(subject, f"{{{SAML}}}SubjectConfirmation",
                                    Method="urn:oasis:names:tc:SAML:2.0:cm:bearer")
    etree.SubElement(confirmation, f"{{{SAML}}}SubjectConfirmationData",
                     InResponseTo=request_id, NotOnOrAfter=instant(not_after),
                     Recipient=acs_url)
    conditions = etree.SubElement(assertion, f"{{{SAML}}}Conditions",
                                  NotBefore=instant(not_before), NotOnOrAfter=instant(not_after))
    restriction = etree.SubElement(conditions, f"{{{SAML}}}AudienceRestriction")
    etree.SubElement(restriction, f"{{{SAML}}}Audience").text = audience
    authn = etree.SubElement(assertion, f"{{{SAML}}}AuthnStatement",
                             AuthnInstant=instant(issued), SessionIndex=assertion_id)
    context = etree.SubElement(authn, f"{{{SAML}}}AuthnContext")
    etree.SubElement(context, f"{{{SAML}}}AuthnContextClassRef").text = \
        "urn:oasis:names:tc:SAML:2.0:ac:classes:PasswordProtectedTransport"
    statement = etree.SubElement(assertion, f"{{{SAML}}}AttributeStatement")
    attribute = etree.SubElement(statement, f"{{{SAML}}}Attribute", Name="role")
    etree.SubElement(attribute, f"{{{SAML}}}AttributeValue").text = "viewer"
    return response, assertion_id


def sign(response, assertion_id, key_file, cert_file):
    key = open(key_file, "rb").read()
    cert = open(cert_file, "rb").read()
    signer = XMLSigner(signature_algorithm="rsa-sha256", digest_algorithm="sha256",
                       c14n_algorithm="http://www.w3.org/2001/10/xml-exc-c14n#")
    return signer.sign(response, key=key, cert=cert, reference_uri=assertion_id,
                       id_attribute="ID")


def respond(args):
    request_id, acs_url, audience = authn_request(args["redirect_url"])
    if args.get("acs_url"):
        acs_url = args["acs_url"]
    if args.get("audience"):
        audience = args["audience"]
    variant = args["variant"]
    now = datetime.datetime.now(datetime.timezone.utc)
    response, assertion_id = build(args, request_id, acs_url, audience, now)
    if variant == "unsigned":
        placeholder = response.find(f".//{{{DS}}}Signature")
        placeholder.getparent().remove(placeholder)
        signed = response
    else:
        key, cert = args["key"], args["cert"]
        if variant == "other_key":
            key, cert = args["other_key"], args["other_cert"]
        signed = sign(response, assertion_id, key, cert)
    assertion = signed.find(f"{{{SAML}}}Assertion")
    if variant == "altered_name_id":
        assertion.find(f".//{{{SAML}}}NameID").text = args["victim_email"]
    if variant == "altered_attribute":
        assertion.find(f".//{{{SAML}}}AttributeValue").text = "admin"
    if variant in ("xsw_sibling", "xsw_wrapped"):
        evil = deepcopy(assertion)
        evil.set("ID", "_evil" + uuid.uuid4().hex)
        evil.remove(evil.find(f"{{{DS}}}Signature"))
        evil.find(f".//{{{SAML}}}NameID").text = args["victim_email"]
        if variant == "xsw_sibling":
            # The forged assertion first, the signed one after it.
            assertion.addprevious(evil)
        else:
            # The signed assertion hidden inside the forged one, which takes its place.
            signed.replace(assertion, evil)
            extensions = etree.SubElement(evil, f"{{{SAML}}}Advice")
            extensions.append(assertion)
    text = etree.tostring(signed, xml_declaration=True, encoding="UTF-8").decode()
    if variant == "comment_in_name_id":
        # The IdP signed `victim@...evil.example.com`, an address the attacker owns; a
        # comment before `.evil.example.com` leaves the signature valid (C14N drops
        # comments) and a careless parser reads only the victim's address before it.
        suffix = ".evil.example.com"
        text = text.replace(args["email"], args["email"][: -len(suffix)] + "<!---->" + suffix, 1)
    if variant == "doctype":
        text = text.replace("<?xml version='1.0' encoding='UTF-8'?>",
                            "<?xml version='1.0' encoding='UTF-8'?>\n<!DOCTYPE r [<!ENTITY x SYSTEM \"file:///etc/passwd\">]>")
    return base64.b64encode(text.encode()).decode()


if __name__ == "__main__":
    if sys.argv[1] == "keypair":
        keypair(sys.argv[2], sys.argv[3], expired="--expired" in sys.argv)
    elif sys.argv[1] == "respond":
        print(respond(json.loads(sys.argv[2])))
