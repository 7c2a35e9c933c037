//! DNS servers on loopback a test answers from: SERVFAIL, fixed addresses, a zone.

use super::*;

/// A DNS server on loopback that answers SERVFAIL to every query: configured as the
/// proxy's name server, no lookup ever leaves the machine.
pub async fn servfail_dns() -> SocketAddr {
    loopback_dns(None).await
}

/// A DNS server on loopback that answers every A query with `addrs` (in that order) and
/// every other query with no records: names the test invents resolve to its own
/// loopback addresses, and no lookup leaves the machine.
pub async fn static_dns(addrs: Vec<std::net::Ipv4Addr>) -> SocketAddr {
    loopback_dns(Some(addrs)).await
}

/// A DNS server on 127.0.0.1: SERVFAIL to everything (`None`), or these A records.
async fn loopback_dns(a_records: Option<Vec<std::net::Ipv4Addr>>) -> SocketAddr {
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind dns");
    serve_dns(socket, move |_| a_records.clone())
}

/// A DNS server on `socket` (bound anywhere, e.g. in a [`Netns`]) answering A queries
/// for the names of `zone` with their address, and every other query with no records.
pub fn zone_dns(socket: std::net::UdpSocket, zone: &[(&str, &str)]) -> SocketAddr {
    let zone: HashMap<String, std::net::Ipv4Addr> = zone
        .iter()
        .map(|(name, addr)| (name.to_string(), addr.parse().expect("IPv4")))
        .collect();
    serve_dns(socket, move |name| {
        Some(zone.get(name).into_iter().copied().collect())
    })
}

/// Serves DNS on `socket`: `answer(name)` gives the A records for a name, `None` for
/// SERVFAIL; queries for other types get no records.
fn serve_dns(
    socket: std::net::UdpSocket,
    answer: impl Fn(&str) -> Option<Vec<std::net::Ipv4Addr>> + Send + 'static,
) -> SocketAddr {
    socket.set_nonblocking(true).expect("nonblocking");
    let socket = tokio::net::UdpSocket::from_std(socket).expect("tokio socket");
    let addr = socket.local_addr().expect("addr");
    tokio::spawn(async move {
        let mut buf = [0u8; 1500];
        while let Ok((len, peer)) = socket.recv_from(&mut buf).await {
            // Header + first question only.
            let mut end = 12;
            let mut labels = Vec::new();
            while end < len && buf[end] != 0 {
                let next = end + 1 + usize::from(buf[end]);
                labels.push(String::from_utf8_lossy(&buf[end + 1..next.min(len)]).to_lowercase());
                end = next;
            }
            if len < 12 || end + 5 > len {
                continue;
            }
            let qtype = u16::from_be_bytes([buf[end + 1], buf[end + 2]]);
            let end = end + 5;
            let mut reply = buf[..end].to_vec();
            reply[4..6].copy_from_slice(&[0, 1]);
            reply[6..12].fill(0);
            match answer(&labels.join(".")) {
                None => {
                    reply[2] = 0x80 | (buf[2] & 0x01); // QR, keep RD
                    reply[3] = 0x82; // RA, SERVFAIL
                }
                Some(addrs) => {
                    let answers: &[std::net::Ipv4Addr] = if qtype == 1 { &addrs } else { &[] };
                    reply[2] = 0x84 | (buf[2] & 0x01); // QR, AA, keep RD
                    reply[3] = 0x80; // RA, NOERROR
                    reply[6..8].copy_from_slice(&(answers.len() as u16).to_be_bytes());
                    for ip in answers {
                        reply.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4]);
                        reply.extend_from_slice(&ip.octets());
                    }
                }
            }
            let _ = socket.send_to(&reply, peer).await;
        }
    });
    addr
}
