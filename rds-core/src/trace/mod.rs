//! Wire capture: trace records and the pcap writer.
