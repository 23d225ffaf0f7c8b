//! The rdma-core bindings' layout against the installed headers: `layout_matches_headers`
//! writes a C program printing `sizeof`, `_Alignof` and `offsetof` of every struct and field
//! `rds_core::ib::ffi` binds, and the value of every constant, compiles it with `cc` against
//! the installed `<infiniband/verbs.h>` and `<rdma/rdma_cma.h>`, runs it and requires an exact
//! match with Rust's `size_of` / `align_of` / `offset_of!`.
//!
//! Prerequisites (headers, run-time libraries, a C compiler) come from
//! `.ci/deps.d/ibverbs-dev.sh`; as root the test runs it when something is missing.

mod ib_prereqs;

use std::collections::BTreeMap;
use std::mem::{align_of, offset_of, size_of};
use std::path::Path;
use std::process::Command;

use rds_core::ib::ffi;

use ib_prereqs::*;

/// One value to compare: a C expression and the Rust value it must equal.
struct Check {
    name: String,
    c_expr: String,
    rust: i64,
}

/// C spelling of a bound type (`struct X` or `union X`).
fn c_type(rust_name: &str) -> String {
    match rust_name {
        "ibv_gid" => "union ibv_gid".to_string(),
        other => format!("struct {other}"),
    }
}

fn clean(path: &str) -> String {
    path.chars().filter(|c| !c.is_whitespace()).collect()
}

macro_rules! size_align {
    ($checks:ident, $($t:ident),* $(,)?) => {$(
        $checks.push(Check {
            name: format!("sizeof {}", stringify!($t)),
            c_expr: format!("sizeof({})", c_type(stringify!($t))),
            rust: size_of::<ffi::$t>() as i64,
        });
        $checks.push(Check {
            name: format!("alignof {}", stringify!($t)),
            c_expr: format!("_Alignof({})", c_type(stringify!($t))),
            rust: align_of::<ffi::$t>() as i64,
        });
    )*};
}

/// `off!(checks, type, rust.path)` or `off!(checks, type, rust.path => "c.path")`.
macro_rules! off {
    ($checks:ident, $t:ident, $($f:ident).+ => $c:literal) => {
        $checks.push(Check {
            name: format!("offsetof {}.{}", stringify!($t), $c),
            c_expr: format!("offsetof({}, {})", c_type(stringify!($t)), $c),
            rust: offset_of!(ffi::$t, $($f).+) as i64,
        });
    };
    ($checks:ident, $t:ident, $($f:ident).+) => {
        off!($checks, $t, $($f).+ => "");
        let last = $checks.last_mut().expect("just pushed");
        let path = clean(stringify!($($f).+));
        last.name = format!("offsetof {}.{}", stringify!($t), path);
        last.c_expr = format!("offsetof({}, {})", c_type(stringify!($t)), path);
    };
}

/// Every field of a struct, same path in C and Rust.
macro_rules! fields {
    ($checks:ident, $t:ident { $($f:ident),* $(,)? }) => {$(
        off!($checks, $t, $f);
    )*};
}

macro_rules! consts {
    ($checks:ident, $($c:ident),* $(,)?) => {$(
        $checks.push(Check {
            name: stringify!($c).to_string(),
            c_expr: format!("(long long)({})", stringify!($c)),
            rust: ffi::$c as i64,
        });
    )*};
}

fn checks() -> Vec<Check> {
    let mut c = Vec::new();
    size_align!(
        c,
        ibv_gid,
        ibv_device_attr,
        ibv_port_attr,
        ibv_wc,
        ibv_mw_bind_info,
        ibv_pd,
        ibv_mr,
        ibv_global_route,
        ibv_ah_attr,
        ibv_qp_cap,
        ibv_qp_init_attr,
        ibv_qp_attr,
        ibv_sge,
        ibv_send_wr,
        ibv_recv_wr,
        ibv_qp,
        ibv_comp_channel,
        ibv_cq,
        _ibv_device_ops,
        ibv_device,
        ibv_context_ops,
        ibv_context,
        rdma_ib_addr,
        rdma_addr,
        rdma_route,
        rdma_event_channel,
        rdma_cm_id,
        rdma_conn_param,
        rdma_ud_param,
        rdma_cm_event,
    );

    off!(c, ibv_gid, raw);
    off!(c, ibv_gid, global.subnet_prefix);
    off!(c, ibv_gid, global.interface_id);

    fields!(
        c,
        ibv_device_attr {
            fw_ver,
            node_guid,
            sys_image_guid,
            max_mr_size,
            page_size_cap,
            vendor_id,
            vendor_part_id,
            hw_ver,
            max_qp,
            max_qp_wr,
            device_cap_flags,
            max_sge,
            max_sge_rd,
            max_cq,
            max_cqe,
            max_mr,
            max_pd,
            max_qp_rd_atom,
            max_ee_rd_atom,
            max_res_rd_atom,
            max_qp_init_rd_atom,
            max_ee_init_rd_atom,
            atomic_cap,
            max_ee,
            max_rdd,
            max_mw,
            max_raw_ipv6_qp,
            max_raw_ethy_qp,
            max_mcast_grp,
            max_mcast_qp_attach,
            max_total_mcast_qp_attach,
            max_ah,
            max_fmr,
            max_map_per_fmr,
            max_srq,
            max_srq_wr,
            max_srq_sge,
            max_pkeys,
            local_ca_ack_delay,
            phys_port_cnt,
        }
    );
    fields!(
        c,
        ibv_port_attr {
            state,
            max_mtu,
            active_mtu,
            gid_tbl_len,
            port_cap_flags,
            max_msg_sz,
            bad_pkey_cntr,
            qkey_viol_cntr,
            pkey_tbl_len,
            lid,
            sm_lid,
            lmc,
            max_vl_num,
            sm_sl,
            subnet_timeout,
            init_type_reply,
            active_width,
            active_speed,
            phys_state,
            link_layer,
            flags,
            port_cap_flags2,
        }
    );
    fields!(
        c,
        ibv_wc {
            wr_id,
            status,
            opcode,
            vendor_err,
            byte_len,
            imm_data,
            qp_num,
            src_qp,
            wc_flags,
            pkey_index,
            slid,
            sl,
            dlid_path_bits,
        }
    );
    off!(c, ibv_wc, imm_data => "invalidated_rkey");
    fields!(
        c,
        ibv_mw_bind_info {
            mr,
            addr,
            length,
            mw_access_flags
        }
    );
    fields!(c, ibv_pd { context, handle });
    fields!(
        c,
        ibv_mr {
            context,
            pd,
            addr,
            length,
            handle,
            lkey,
            rkey
        }
    );
    fields!(
        c,
        ibv_global_route {
            dgid,
            flow_label,
            sgid_index,
            hop_limit,
            traffic_class
        }
    );
    fields!(
        c,
        ibv_ah_attr {
            grh,
            dlid,
            sl,
            src_path_bits,
            static_rate,
            is_global,
            port_num
        }
    );
    fields!(
        c,
        ibv_qp_cap {
            max_send_wr,
            max_recv_wr,
            max_send_sge,
            max_recv_sge,
            max_inline_data,
        }
    );
    fields!(
        c,
        ibv_qp_init_attr {
            qp_context,
            send_cq,
            recv_cq,
            srq,
            cap,
            qp_type,
            sq_sig_all,
        }
    );
    fields!(
        c,
        ibv_qp_attr {
            qp_state,
            cur_qp_state,
            path_mtu,
            path_mig_state,
            qkey,
            rq_psn,
            sq_psn,
            dest_qp_num,
            qp_access_flags,
            cap,
            ah_attr,
            alt_ah_attr,
            pkey_index,
            alt_pkey_index,
            en_sqd_async_notify,
            sq_draining,
            max_rd_atomic,
            max_dest_rd_atomic,
            min_rnr_timer,
            port_num,
            timeout,
            retry_cnt,
            rnr_retry,
            alt_port_num,
            alt_timeout,
            rate_limit,
        }
    );
    fields!(c, ibv_sge { addr, length, lkey });
    fields!(
        c,
        ibv_send_wr {
            wr_id,
            next,
            sg_list,
            num_sge,
            opcode,
            send_flags,
            imm_data,
            wr,
        }
    );
    off!(c, ibv_send_wr, imm_data => "invalidate_rkey");
    off!(c, ibv_send_wr, wr.rdma.remote_addr);
    off!(c, ibv_send_wr, wr.rdma.rkey);
    off!(c, ibv_send_wr, wr.atomic.remote_addr);
    off!(c, ibv_send_wr, wr.atomic.compare_add);
    off!(c, ibv_send_wr, wr.atomic.swap);
    off!(c, ibv_send_wr, wr.atomic.rkey);
    off!(c, ibv_send_wr, wr.ud.ah);
    off!(c, ibv_send_wr, wr.ud.remote_qpn);
    off!(c, ibv_send_wr, wr.ud.remote_qkey);
    off!(c, ibv_send_wr, qp_type.remote_srqn => "qp_type.xrc.remote_srqn");
    off!(c, ibv_send_wr, ext.bind_mw.mw => "bind_mw.mw");
    off!(c, ibv_send_wr, ext.bind_mw.rkey => "bind_mw.rkey");
    off!(c, ibv_send_wr, ext.bind_mw.bind_info => "bind_mw.bind_info");
    off!(c, ibv_send_wr, ext.tso.hdr => "tso.hdr");
    off!(c, ibv_send_wr, ext.tso.hdr_sz => "tso.hdr_sz");
    off!(c, ibv_send_wr, ext.tso.mss => "tso.mss");
    fields!(
        c,
        ibv_recv_wr {
            wr_id,
            next,
            sg_list,
            num_sge
        }
    );
    fields!(
        c,
        ibv_qp {
            context,
            qp_context,
            pd,
            send_cq,
            recv_cq,
            srq,
            handle,
            qp_num,
            state,
            qp_type,
            mutex,
            cond,
            events_completed,
        }
    );
    fields!(
        c,
        ibv_comp_channel {
            context,
            fd,
            refcnt
        }
    );
    fields!(
        c,
        ibv_cq {
            context,
            channel,
            cq_context,
            handle,
            cqe,
            mutex,
            cond,
            comp_events_completed,
            async_events_completed,
        }
    );
    fields!(c, _ibv_device_ops { _dummy1, _dummy2 });
    fields!(
        c,
        ibv_device {
            _ops,
            node_type,
            transport_type,
            name,
            dev_name,
            dev_path,
            ibdev_path,
        }
    );
    fields!(
        c,
        ibv_context_ops {
            _compat_query_device,
            _compat_query_port,
            _compat_alloc_pd,
            _compat_dealloc_pd,
            _compat_reg_mr,
            _compat_rereg_mr,
            _compat_dereg_mr,
            alloc_mw,
            bind_mw,
            dealloc_mw,
            _compat_create_cq,
            poll_cq,
            req_notify_cq,
            _compat_cq_event,
            _compat_resize_cq,
            _compat_destroy_cq,
            _compat_create_srq,
            _compat_modify_srq,
            _compat_query_srq,
            _compat_destroy_srq,
            post_srq_recv,
            _compat_create_qp,
            _compat_query_qp,
            _compat_modify_qp,
            _compat_destroy_qp,
            post_send,
            post_recv,
            _compat_create_ah,
            _compat_destroy_ah,
            _compat_attach_mcast,
            _compat_detach_mcast,
            _compat_async_event,
        }
    );
    fields!(
        c,
        ibv_context {
            device,
            ops,
            cmd_fd,
            async_fd,
            num_comp_vectors,
            mutex,
            abi_compat,
        }
    );
    // The inline verbs call through these: check their absolute offsets in the context too.
    off!(c, ibv_context, ops.poll_cq);
    off!(c, ibv_context, ops.req_notify_cq);
    off!(c, ibv_context, ops.post_send);
    off!(c, ibv_context, ops.post_recv);

    fields!(c, rdma_ib_addr { sgid, dgid, pkey });
    fields!(
        c,
        rdma_addr {
            src_storage,
            dst_storage
        }
    );
    off!(c, rdma_addr, src_storage => "src_addr");
    off!(c, rdma_addr, src_storage => "src_sin");
    off!(c, rdma_addr, src_storage => "src_sin6");
    off!(c, rdma_addr, dst_storage => "dst_addr");
    off!(c, rdma_addr, dst_storage => "dst_sin");
    off!(c, rdma_addr, dst_storage => "dst_sin6");
    off!(c, rdma_addr, addr => "addr.ibaddr");
    off!(c, rdma_addr, addr.sgid => "addr.ibaddr.sgid");
    off!(c, rdma_addr, addr.dgid => "addr.ibaddr.dgid");
    off!(c, rdma_addr, addr.pkey => "addr.ibaddr.pkey");
    fields!(
        c,
        rdma_route {
            addr,
            path_rec,
            num_paths
        }
    );
    fields!(c, rdma_event_channel { fd });
    fields!(
        c,
        rdma_cm_id {
            verbs,
            channel,
            context,
            qp,
            route,
            ps,
            port_num,
            event,
            send_cq_channel,
            send_cq,
            recv_cq_channel,
            recv_cq,
            srq,
            pd,
            qp_type,
        }
    );
    off!(c, rdma_cm_id, route.addr.src_storage);
    off!(c, rdma_cm_id, route.addr.dst_storage);
    off!(c, rdma_cm_id, route.addr.addr.sgid => "route.addr.addr.ibaddr.sgid");
    fields!(
        c,
        rdma_conn_param {
            private_data,
            private_data_len,
            responder_resources,
            initiator_depth,
            flow_control,
            retry_count,
            rnr_retry_count,
            srq,
            qp_num,
        }
    );
    fields!(
        c,
        rdma_ud_param {
            private_data,
            private_data_len,
            ah_attr,
            qp_num,
            qkey
        }
    );
    fields!(
        c,
        rdma_cm_event {
            id,
            listen_id,
            event,
            status,
            param
        }
    );
    off!(c, rdma_cm_event, param.conn.private_data);
    off!(c, rdma_cm_event, param.conn.private_data_len);
    off!(c, rdma_cm_event, param.conn.responder_resources);
    off!(c, rdma_cm_event, param.conn.initiator_depth);
    off!(c, rdma_cm_event, param.conn.flow_control);
    off!(c, rdma_cm_event, param.conn.retry_count);
    off!(c, rdma_cm_event, param.conn.rnr_retry_count);
    off!(c, rdma_cm_event, param.conn.srq);
    off!(c, rdma_cm_event, param.conn.qp_num);
    off!(c, rdma_cm_event, param.ud.private_data);
    off!(c, rdma_cm_event, param.ud.qkey);

    // Field types the Rust side spells differently (enums, union arms): same sizes.
    c.push(Check {
        name: "sizeof ibv_send_wr.wr".into(),
        c_expr: "sizeof(((struct ibv_send_wr *)0)->wr)".into(),
        rust: size_of::<ffi::ibv_send_wr_wr>() as i64,
    });
    c.push(Check {
        name: "sizeof rdma_cm_event.param".into(),
        c_expr: "sizeof(((struct rdma_cm_event *)0)->param)".into(),
        rust: size_of::<ffi::rdma_cm_event_param>() as i64,
    });
    c.push(Check {
        name: "sizeof enum ibv_wc_status".into(),
        c_expr: "sizeof(enum ibv_wc_status)".into(),
        rust: size_of::<ffi::ibv_wc_status>() as i64,
    });
    c.push(Check {
        name: "sizeof enum rdma_port_space".into(),
        c_expr: "sizeof(enum rdma_port_space)".into(),
        rust: size_of::<ffi::rdma_port_space>() as i64,
    });
    c.push(Check {
        name: "sizeof pthread_mutex_t".into(),
        c_expr: "sizeof(pthread_mutex_t)".into(),
        rust: size_of::<libc::pthread_mutex_t>() as i64,
    });
    c.push(Check {
        name: "sizeof pthread_cond_t".into(),
        c_expr: "sizeof(pthread_cond_t)".into(),
        rust: size_of::<libc::pthread_cond_t>() as i64,
    });

    consts!(
        c,
        IBV_NODE_UNKNOWN,
        IBV_NODE_CA,
        IBV_NODE_SWITCH,
        IBV_NODE_ROUTER,
        IBV_NODE_RNIC,
        IBV_NODE_USNIC,
        IBV_NODE_USNIC_UDP,
        IBV_NODE_UNSPECIFIED,
        IBV_TRANSPORT_UNKNOWN,
        IBV_TRANSPORT_IB,
        IBV_TRANSPORT_IWARP,
        IBV_TRANSPORT_USNIC,
        IBV_TRANSPORT_USNIC_UDP,
        IBV_TRANSPORT_UNSPECIFIED,
        IBV_ATOMIC_NONE,
        IBV_ATOMIC_HCA,
        IBV_ATOMIC_GLOB,
        IBV_MTU_256,
        IBV_MTU_512,
        IBV_MTU_1024,
        IBV_MTU_2048,
        IBV_MTU_4096,
        IBV_PORT_NOP,
        IBV_PORT_DOWN,
        IBV_PORT_INIT,
        IBV_PORT_ARMED,
        IBV_PORT_ACTIVE,
        IBV_PORT_ACTIVE_DEFER,
        IBV_LINK_LAYER_UNSPECIFIED,
        IBV_LINK_LAYER_INFINIBAND,
        IBV_LINK_LAYER_ETHERNET,
        IBV_WC_SUCCESS,
        IBV_WC_LOC_LEN_ERR,
        IBV_WC_LOC_QP_OP_ERR,
        IBV_WC_LOC_EEC_OP_ERR,
        IBV_WC_LOC_PROT_ERR,
        IBV_WC_WR_FLUSH_ERR,
        IBV_WC_MW_BIND_ERR,
        IBV_WC_BAD_RESP_ERR,
        IBV_WC_LOC_ACCESS_ERR,
        IBV_WC_REM_INV_REQ_ERR,
        IBV_WC_REM_ACCESS_ERR,
        IBV_WC_REM_OP_ERR,
        IBV_WC_RETRY_EXC_ERR,
        IBV_WC_RNR_RETRY_EXC_ERR,
        IBV_WC_LOC_RDD_VIOL_ERR,
        IBV_WC_REM_INV_RD_REQ_ERR,
        IBV_WC_REM_ABORT_ERR,
        IBV_WC_INV_EECN_ERR,
        IBV_WC_INV_EEC_STATE_ERR,
        IBV_WC_FATAL_ERR,
        IBV_WC_RESP_TIMEOUT_ERR,
        IBV_WC_GENERAL_ERR,
        IBV_WC_TM_ERR,
        IBV_WC_TM_RNDV_INCOMPLETE,
        IBV_WC_SEND,
        IBV_WC_RDMA_WRITE,
        IBV_WC_RDMA_READ,
        IBV_WC_COMP_SWAP,
        IBV_WC_FETCH_ADD,
        IBV_WC_BIND_MW,
        IBV_WC_LOCAL_INV,
        IBV_WC_TSO,
        IBV_WC_RECV,
        IBV_WC_RECV_RDMA_WITH_IMM,
        IBV_WC_GRH,
        IBV_WC_WITH_IMM,
        IBV_WC_IP_CSUM_OK,
        IBV_WC_WITH_INV,
        IBV_ACCESS_LOCAL_WRITE,
        IBV_ACCESS_REMOTE_WRITE,
        IBV_ACCESS_REMOTE_READ,
        IBV_ACCESS_REMOTE_ATOMIC,
        IBV_ACCESS_MW_BIND,
        IBV_ACCESS_ZERO_BASED,
        IBV_ACCESS_ON_DEMAND,
        IBV_QPT_RC,
        IBV_QPT_UC,
        IBV_QPT_UD,
        IBV_QP_STATE,
        IBV_QP_CUR_STATE,
        IBV_QP_ACCESS_FLAGS,
        IBV_QP_PKEY_INDEX,
        IBV_QP_PORT,
        IBV_QP_AV,
        IBV_QP_PATH_MTU,
        IBV_QP_TIMEOUT,
        IBV_QP_RETRY_CNT,
        IBV_QP_RNR_RETRY,
        IBV_QP_RQ_PSN,
        IBV_QP_MAX_QP_RD_ATOMIC,
        IBV_QP_MIN_RNR_TIMER,
        IBV_QP_SQ_PSN,
        IBV_QP_MAX_DEST_RD_ATOMIC,
        IBV_QP_CAP,
        IBV_QP_DEST_QPN,
        IBV_QPS_RESET,
        IBV_QPS_INIT,
        IBV_QPS_RTR,
        IBV_QPS_RTS,
        IBV_QPS_SQD,
        IBV_QPS_SQE,
        IBV_QPS_ERR,
        IBV_QPS_UNKNOWN,
        IBV_WR_RDMA_WRITE,
        IBV_WR_RDMA_WRITE_WITH_IMM,
        IBV_WR_SEND,
        IBV_WR_SEND_WITH_IMM,
        IBV_WR_RDMA_READ,
        IBV_WR_ATOMIC_CMP_AND_SWP,
        IBV_WR_ATOMIC_FETCH_AND_ADD,
        IBV_WR_LOCAL_INV,
        IBV_WR_BIND_MW,
        IBV_WR_SEND_WITH_INV,
        IBV_SEND_FENCE,
        IBV_SEND_SIGNALED,
        IBV_SEND_SOLICITED,
        IBV_SEND_INLINE,
        IBV_SYSFS_NAME_MAX,
        IBV_SYSFS_PATH_MAX,
        RDMA_CM_EVENT_ADDR_RESOLVED,
        RDMA_CM_EVENT_ADDR_ERROR,
        RDMA_CM_EVENT_ROUTE_RESOLVED,
        RDMA_CM_EVENT_ROUTE_ERROR,
        RDMA_CM_EVENT_CONNECT_REQUEST,
        RDMA_CM_EVENT_CONNECT_RESPONSE,
        RDMA_CM_EVENT_CONNECT_ERROR,
        RDMA_CM_EVENT_UNREACHABLE,
        RDMA_CM_EVENT_REJECTED,
        RDMA_CM_EVENT_ESTABLISHED,
        RDMA_CM_EVENT_DISCONNECTED,
        RDMA_CM_EVENT_DEVICE_REMOVAL,
        RDMA_CM_EVENT_MULTICAST_JOIN,
        RDMA_CM_EVENT_MULTICAST_ERROR,
        RDMA_CM_EVENT_ADDR_CHANGE,
        RDMA_CM_EVENT_TIMEWAIT_EXIT,
        RDMA_PS_IPOIB,
        RDMA_PS_TCP,
        RDMA_PS_UDP,
        RDMA_PS_IB,
        RDMA_MAX_RESP_RES,
        RDMA_MAX_INIT_DEPTH,
    );
    c
}

fn c_program(checks: &[Check]) -> String {
    let mut s = String::from(
        "#include <stddef.h>\n#include <stdio.h>\n#include <pthread.h>\n\
         #include <infiniband/verbs.h>\n#include <rdma/rdma_cma.h>\n\n\
         int main(void)\n{\n",
    );
    for (i, c) in checks.iter().enumerate() {
        s.push_str(&format!(
            "\tprintf(\"{i} %lld\\n\", (long long)({}));\n",
            c.c_expr
        ));
    }
    s.push_str("\treturn 0;\n}\n");
    s
}

#[test]
fn layout_matches_headers() {
    ensure_prereqs();
    let checks = checks();
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("ib_layout.{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create the temp dir");
    let src = dir.join("ib_layout.c");
    let exe = dir.join("ib_layout");
    std::fs::write(&src, c_program(&checks)).expect("write the C program");
    let out = Command::new("cc")
        .args(["-std=gnu11", "-Wall", "-Werror", "-O0", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("run cc");
    assert!(
        out.status.success(),
        "cc failed on {}:\n{}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().expect("run the layout program");
    assert!(run.status.success(), "layout program failed");
    let stdout = String::from_utf8(run.stdout).expect("ASCII output");
    let c_values: BTreeMap<usize, i64> = stdout
        .lines()
        .map(|l| {
            let (i, v) = l.split_once(' ').expect("'index value' lines");
            (i.parse().expect("index"), v.parse().expect("value"))
        })
        .collect();
    assert_eq!(c_values.len(), checks.len(), "one line per check");
    let mismatches: Vec<String> = checks
        .iter()
        .enumerate()
        .filter(|(i, c)| c_values[i] != c.rust)
        .map(|(i, c)| {
            format!(
                "{}: C {} (`{}`), Rust {}",
                c.name, c_values[&i], c.c_expr, c.rust
            )
        })
        .collect();
    assert!(
        mismatches.is_empty(),
        "{} of {} layout checks differ:\n{}",
        mismatches.len(),
        checks.len(),
        mismatches.join("\n")
    );
    // A few absolute facts, so a wrong table cannot pass by construction.
    assert_eq!(size_of::<ffi::ibv_wc>(), 48);
    assert_eq!(size_of::<ffi::ibv_send_wr>(), 128);
    assert_eq!(offset_of!(ffi::ibv_send_wr, wr), 40);
    assert_eq!(offset_of!(ffi::rdma_cm_event, param), 24);
    eprintln!("ib_layout: {} checks, all equal", checks.len());
    let _ = std::fs::remove_dir_all(&dir);
}
