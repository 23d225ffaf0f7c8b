//! Unit tests of the TCP transport.

use super::*;

#[test]
fn connection_cap_follows_the_descriptor_limit() {
    assert_eq!(conn_cap_for(None), TCP_CONNS_MAX);
    assert_eq!(conn_cap_for(Some(1024)), 512);
    assert_eq!(conn_cap_for(Some(1 << 20)), TCP_CONNS_MAX);
    assert_eq!(conn_cap_for(Some(20)), TCP_CONNS_MIN);
    assert!(nofile_soft().is_some_and(|n| n > 0));
}
