//! A bundle as WARC 1.1 (ISO 28500), for the archives' tools: a `warcinfo` record
//! first (the bundle line); each robots.txt the bundle holds as the `response` it was
//! (its status, `Cache-Control`, `ETag` and `Last-Modified` as the fetch recorded them,
//! then its octets; headers robotsgate did not keep are not invented); each chain head
//! as a `metadata` record; each evidence record as a `metadata` record whose block is
//! the line as written, with `WARC-Refers-To` naming the robots.txt response it was
//! decided on (or fetched into) and its place and proof in `Robotsgate-*` fields.
//!
//! Record ids are derived from what they hold (`urn:uuid:`, the first 16 octets of a
//! SHA-256, version 8), so one bundle exported twice gives one file twice.

use std::io::Write;

use serde_json::Value;

use super::bundle::{Bundle, Exported};
use super::record::hex;

/// Writes `bundle` as WARC 1.1 to `out`.
pub fn write(bundle: &Bundle, out: &mut impl Write) -> std::io::Result<Exported> {
    let created = bundle.header["created"].as_str().unwrap_or("");
    let info = format!(
        "software: robotsgate/{}\r\nformat: WARC File Format 1.1\r\ndescription: robotsgate evidence bundle {}\r\n",
        env!("CARGO_PKG_VERSION"),
        bundle.header
    );
    record(
        out,
        &[
            ("WARC-Type", "warcinfo"),
            ("WARC-Date", created),
            ("WARC-Record-ID", &id(&["warcinfo", created])),
            ("Content-Type", "application/warc-fields"),
        ],
        info.as_bytes(),
    )?;
    let responses = write_policies(bundle, out, created)?;
    write_heads(bundle, out, created)?;
    let mut exported = Exported {
        chains: bundle.heads.len(),
        policies: bundle.policies.len(),
        ..Exported::default()
    };
    for item in &bundle.records {
        write_record(item, &responses, out, created)?;
        exported.records += 1;
        exported.decisions += usize::from(item.json["type"] == "decision");
    }
    out.flush()?;
    Ok(exported)
}

/// Each robots.txt the bundle holds, as the `response` it was: by SHA-256, the record
/// id and target URI written.
fn write_policies(
    bundle: &Bundle,
    out: &mut impl Write,
    created: &str,
) -> std::io::Result<std::collections::BTreeMap<String, (String, String)>> {
    let mut responses = std::collections::BTreeMap::new();
    for (sha, octets) in &bundle.policies {
        let naming =
            |r: &&Value| r["policy"]["sha256"] == sha.as_str() || r["sha256"] == sha.as_str();
        let records = || bundle.records.iter().map(|i| &i.json);
        let fetched = records().find(|r| r["type"] == "fetched" && r["sha256"] == sha.as_str());
        let any = records().find(naming);
        let url = fetched
            .and_then(|r| r["url"].as_str().map(str::to_string))
            .or_else(|| {
                any.and_then(|r| r["origin"].as_str())
                    .map(|o| format!("{o}/robots.txt"))
            })
            .unwrap_or_else(|| format!("urn:robotsgate:policy:{sha}"));
        let date = fetched
            .or(any)
            .and_then(|r| r["t"].as_str())
            .unwrap_or(created);
        let record_id = id(&["policy", sha]);
        let block = http_response(fetched, octets);
        let payload = format!("sha256:{}", base32(&sha256(octets)));
        let block_digest = format!("sha256:{}", base32(&sha256(&block)));
        record(
            out,
            &[
                ("WARC-Type", "response"),
                ("WARC-Target-URI", &url),
                ("WARC-Date", date),
                ("WARC-Record-ID", &record_id),
                ("Content-Type", "application/http;msgtype=response"),
                ("WARC-Payload-Digest", &payload),
                ("WARC-Block-Digest", &block_digest),
            ],
            &block,
        )?;
        responses.insert(sha.clone(), (record_id, url));
    }
    Ok(responses)
}

/// Each chain's head lines, as `metadata` records.
fn write_heads(bundle: &Bundle, out: &mut impl Write, created: &str) -> std::io::Result<()> {
    for (chain, heads) in &bundle.heads {
        for (n, line) in heads.iter().enumerate() {
            let head: Value = serde_json::from_str(line).unwrap_or(Value::Null);
            record(
                out,
                &[
                    ("WARC-Type", "metadata"),
                    (
                        "WARC-Target-URI",
                        &format!("urn:robotsgate:chain:{chain}:heads"),
                    ),
                    ("WARC-Date", head["t"].as_str().unwrap_or(created)),
                    ("WARC-Record-ID", &id(&["head", chain, &n.to_string()])),
                    ("Content-Type", "application/json"),
                    ("Robotsgate-Chain", chain),
                ],
                line.as_bytes(),
            )?;
        }
    }
    Ok(())
}

/// One evidence record, as a `metadata` record referring to the robots.txt response it
/// names (`responses`, by SHA-256).
fn write_record(
    item: &super::bundle::Item,
    responses: &std::collections::BTreeMap<String, (String, String)>,
    out: &mut impl Write,
    created: &str,
) -> std::io::Result<()> {
    let r = &item.json;
    let seq = r["seq"].as_u64().unwrap_or(0).to_string();
    let target = match r["url"].as_str() {
        Some(url) => url.to_string(),
        None => format!("urn:robotsgate:record:{}:{seq}", item.chain),
    };
    let proof: Vec<String> = item.proof.iter().map(|h| hex(h)).collect();
    let (segment, index) = (item.segment.to_string(), item.index.to_string());
    let size = item.size.map(|s| s.to_string()).unwrap_or_default();
    let record_id = id(&["record", &item.chain, &segment, &index]);
    let joined = proof.join(",");
    let mut fields = vec![
        ("WARC-Type", "metadata"),
        ("WARC-Target-URI", target.as_str()),
        ("WARC-Date", r["t"].as_str().unwrap_or(created)),
        ("WARC-Record-ID", record_id.as_str()),
        ("Content-Type", "application/json"),
        ("Robotsgate-Chain", item.chain.as_str()),
        ("Robotsgate-Segment", segment.as_str()),
        ("Robotsgate-Index", index.as_str()),
        ("Robotsgate-Size", size.as_str()),
        ("Robotsgate-Proof", joined.as_str()),
    ];
    let named = super::bundle::named_policies(r);
    if let Some((referred, url)) = named.first().and_then(|sha| responses.get(sha)) {
        fields.push(("WARC-Refers-To", referred.as_str()));
        fields.push(("WARC-Refers-To-Target-URI", url.as_str()));
    }
    record(out, &fields, &item.line)
}

/// One WARC record: its fields, `Content-Length`, the block, the two CRLFs after it.
fn record(out: &mut impl Write, fields: &[(&str, &str)], block: &[u8]) -> std::io::Result<()> {
    out.write_all(b"WARC/1.1\r\n")?;
    for (name, value) in fields {
        // A field value is one line: nothing a record holds may end it early.
        let value: String = value.chars().filter(|c| *c != '\r' && *c != '\n').collect();
        write!(out, "{name}: {value}\r\n")?;
    }
    write!(out, "Content-Length: {}\r\n\r\n", block.len())?;
    out.write_all(block)?;
    out.write_all(b"\r\n\r\n")
}

/// A robots.txt as an HTTP response: the status and headers its fetch recorded, then
/// its octets.
fn http_response(fetched: Option<&Value>, octets: &[u8]) -> Vec<u8> {
    let status = fetched.and_then(|r| r["status"].as_u64()).unwrap_or(200);
    let mut head = format!("HTTP/1.1 {status} {}\r\n", reason(status));
    head.push_str("Content-Type: text/plain\r\n");
    for (field, name) in [
        ("cache_control", "Cache-Control"),
        ("etag", "ETag"),
        ("last_modified", "Last-Modified"),
    ] {
        if let Some(value) = fetched.and_then(|r| r[field].as_str()) {
            let value: String = value.chars().filter(|c| *c != '\r' && *c != '\n').collect();
            head.push_str(&format!("{name}: {value}\r\n"));
        }
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n", octets.len()));
    let mut block = head.into_bytes();
    block.extend_from_slice(octets);
    block
}

/// A status line's reason phrase.
fn reason(status: u64) -> &'static str {
    u16::try_from(status)
        .ok()
        .and_then(|s| http::StatusCode::from_u16(s).ok())
        .and_then(|s| s.canonical_reason())
        .unwrap_or("")
}

/// A record id from what the record is: `<urn:uuid:…>`.
fn id(parts: &[&str]) -> String {
    let digest = sha256(parts.join("\u{0}").as_bytes());
    let mut b = [0u8; 16];
    b.copy_from_slice(&digest[..16]);
    b[6] = (b[6] & 0x0f) | 0x80;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = hex(&b);
    format!(
        "<urn:uuid:{}-{}-{}-{}-{}>",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

/// SHA-256 of `octets`.
fn sha256(octets: &[u8]) -> Vec<u8> {
    ring::digest::digest(&ring::digest::SHA256, octets)
        .as_ref()
        .to_vec()
}

/// RFC 4648 base32 (upper case, padded), as WARC digests are usually written.
fn base32(octets: &[u8]) -> String {
    const ALPHABET: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    let mut out = String::new();
    for chunk in octets.chunks(5) {
        let mut buf = [0u8; 5];
        buf[..chunk.len()].copy_from_slice(chunk);
        let bits = buf.iter().fold(0u64, |acc, b| (acc << 8) | u64::from(*b));
        let symbols = (chunk.len() * 8).div_ceil(5);
        for i in 0..8 {
            if i < symbols {
                out.push(ALPHABET[((bits >> (35 - i * 5)) & 31) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base32_is_rfc_4648s() {
        for (input, want) in [
            ("", ""),
            ("f", "MY======"),
            ("fo", "MZXQ===="),
            ("foo", "MZXW6==="),
            ("foob", "MZXW6YQ="),
            ("fooba", "MZXW6YTB"),
            ("foobar", "MZXW6YTBOI======"),
        ] {
            assert_eq!(base32(input.as_bytes()), want, "{input}");
        }
    }

    #[test]
    fn ids_are_urn_uuids_of_version_8() {
        let one = id(&["policy", "abc"]);
        assert_eq!(one, id(&["policy", "abc"]));
        assert_ne!(one, id(&["policy", "abd"]));
        assert!(one.starts_with("<urn:uuid:") && one.ends_with('>'));
        assert_eq!(&one[24..25], "8", "{one}");
    }
}
