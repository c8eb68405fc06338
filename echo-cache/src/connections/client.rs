//! Making the `redis` clients of an L2 address: one server or a cluster,
//! plain or TLS, with credentials never printed (see [`redacted`]).

use std::time::Duration;

use redis::cluster::ClusterClient;
use redis::{PushInfo, RedisError};
use tokio::sync::mpsc::UnboundedSender;

/// The cluster client of `seeds`: every seed must share the scheme and the
/// credentials (the cluster's nodes are reached with the seeds' settings).
/// With `pushes`, it speaks RESP3 and sends its pushes there.
pub(super) fn cluster_client(
    seeds: &[String],
    tls_root: Option<&[u8]>,
    timeout: Duration,
    pushes: Option<UnboundedSender<PushInfo>>,
) -> Result<ClusterClient, RedisError> {
    let builder = ClusterClient::builder(seeds.iter().map(String::as_str))
        .connection_timeout(timeout)
        .response_timeout(timeout)
        .retries(3)
        .min_retry_wait(5)
        .max_retry_wait(50);
    let builder = match pushes {
        Some(pushes) => builder
            .use_protocol(redis::ProtocolVersion::RESP3)
            .push_sender(pushes),
        None => builder,
    };
    #[cfg(feature = "tls")]
    let builder = match tls_root {
        Some(pem) => builder.certs(redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(pem.to_vec()),
        }),
        None => builder,
    };
    #[cfg(not(feature = "tls"))]
    debug_assert!(tls_root.is_none(), "TLS roots need the tls feature");
    builder.build()
}

/// The client of `url`. A `rediss://` one trusts `tls_root` (PEM) if given,
/// else the system's root certificates.
pub(super) fn client(url: &str, tls_root: Option<&[u8]>) -> Result<redis::Client, String> {
    #[cfg(feature = "tls")]
    let client = match tls_root {
        Some(pem) => {
            use rustls::pki_types::{CertificateDer, pem::PemObject};
            if CertificateDer::pem_slice_iter(pem).next().is_none() {
                return Err("the TLS roots hold no PEM certificate".to_owned());
            }
            let roots = redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(pem.to_vec()),
            };
            redis::Client::build_with_tls(url, roots)
        }
        None => redis::Client::open(url),
    };
    #[cfg(not(feature = "tls"))]
    let client = {
        debug_assert!(tls_root.is_none(), "TLS roots need the tls feature");
        redis::Client::open(url)
    };
    let client = client.map_err(|e| {
        let tls = url.split_once("://").is_some_and(|(scheme, _)| {
            scheme.eq_ignore_ascii_case("rediss") || scheme.eq_ignore_ascii_case("valkeys")
        });
        if tls && cfg!(not(feature = "tls")) {
            format!("{e} (a rediss:// address needs echo-cache's `tls` feature)")
        } else {
            e.to_string()
        }
    })?;
    // Without the feature a TLS address does not parse.
    #[cfg(feature = "tls")]
    if let redis::ConnectionAddr::TcpTls { insecure, .. } = client.get_connection_info().addr() {
        if *insecure {
            return Err("#insecure (no certificate check) is not supported; \
                        give the server's CA with Builder::l2_tls_root"
                .to_owned());
        }
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            // The program chose no rustls crypto provider: ring, which the
            // `tls` feature builds. Losing a race to another installer is as
            // good.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
    }
    Ok(client)
}

/// `url` with its credentials, if any, masked: `redis://user:***@host`.
pub(super) fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    match rest.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
            None => format!("{scheme}://***@{host}"),
        },
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::redacted;

    #[test]
    fn credentials_are_masked_in_messages() {
        assert_eq!(redacted("redis://app:pw@h:1/3"), "redis://app:***@h:1/3");
        assert_eq!(redacted("redis://:pw@h"), "redis://:***@h");
        assert_eq!(redacted("rediss://pw@h"), "rediss://***@h");
        assert_eq!(redacted("redis://app:p@w@h"), "redis://app:***@h");
        assert_eq!(redacted("redis://h:1/3"), "redis://h:1/3");
        assert_eq!(redacted("not a url"), "not a url");
    }

    #[cfg(not(feature = "tls"))]
    #[test]
    fn rediss_needs_the_tls_feature() {
        let error = super::client("rediss://127.0.0.1:6380", None).unwrap_err();
        assert!(error.contains("`tls` feature"), "{error}");
    }
}
