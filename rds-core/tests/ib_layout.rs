//! The rdma-core bindings against the real thing.
//!
//! - `layout_matches_headers`: writes a C program printing `sizeof`, `_Alignof` and `offsetof`
//!   of every struct and field `rds_core::ib::ffi` binds, and the value of every constant,
//!   compiles it with `cc` against the installed `<infiniband/verbs.h>` and `<rdma/rdma_cma.h>`,
//!   runs it and requires an exact match with Rust's `size_of` / `align_of` / `offset_of!`.
//! - The run-time tests load `libibverbs.so.1` / `librdmacm.so.1` with every symbol we call,
//!   check what a host without RDMA devices reports, and what a missing library reports.
//!
//! Prerequisites (headers, run-time libraries, a C compiler) come from
//! `.ci/deps.d/ibverbs-dev.sh`; as root the tests run it when something is missing.
use std::collections::BTreeMap;
use std::mem::{align_of, offset_of, size_of};
use std::path::{Path, PathBuf};
use std::process::Command;

use rds_core::ib::{self, ffi, IbLib, IbUnavailable};

const DEPS_SCRIPT: &str = ".ci/deps.d/ibverbs-dev.sh";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("rds-core has a parent directory")
        .to_path_buf()
}

fn have_cc() -> bool {
    Command::new("cc")
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

fn have_headers() -> bool {
    Path::new("/usr/include/infiniband/verbs.h").exists()
        && Path::new("/usr/include/rdma/rdma_cma.h").exists()
}

fn have_runtime_libs() -> bool {
    ib::IbLib::open().is_ok()
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Makes sure headers, libraries and cc are there: runs the deps script as root, otherwise
/// fails with a message naming it.
fn ensure_prereqs() {
    if have_cc() && have_headers() && have_runtime_libs() {
        return;
    }
    let script = repo_root().join(DEPS_SCRIPT);
    assert!(
        is_root(),
        "rdma-core headers/libraries or cc are missing and this is not root: run {DEPS_SCRIPT} \
         as root (installs libibverbs-dev, librdmacm-dev, gcc)"
    );
    let st = Command::new("bash")
        .arg(&script)
        .status()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    assert!(st.success(), "{DEPS_SCRIPT} failed ({st})");
    assert!(
        have_cc() && have_headers() && have_runtime_libs(),
        "{DEPS_SCRIPT} ran but headers, libraries or cc are still missing"
    );
}

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

/// Whether this host has RDMA devices (then the "no devices" expectations flip).
fn host_has_rdma_devices() -> bool {
    std::fs::read_dir("/sys/class/infiniband")
        .map(|d| d.count() > 0)
        .unwrap_or(false)
}

#[test]
fn runtime_libraries_load_and_report_devices() {
    ensure_prereqs();
    let lib = ib::lib().expect("libibverbs.so.1 and librdmacm.so.1 load with every symbol");
    assert_eq!(lib.verbs_name(), "libibverbs.so.1");
    assert_eq!(lib.cm_name(), "librdmacm.so.1");
    match ib::availability() {
        Ok(devs) => {
            assert!(
                host_has_rdma_devices(),
                "devices reported without /sys/class/infiniband"
            );
            assert!(!devs.is_empty());
            for d in &devs {
                eprintln!("ib device: {d}");
            }
        }
        Err(e) => {
            assert!(
                !host_has_rdma_devices(),
                "this host has RDMA devices, yet: {e}"
            );
            // libibverbs fails with ENOSYS when it cannot read the uverbs ABI version.
            let kernel = Path::new("/sys/class/infiniband_verbs/abi_version").exists();
            let expected = if kernel {
                IbUnavailable::NoDevices
            } else {
                IbUnavailable::NoKernelSupport
            };
            assert_eq!(e, expected);
            assert!(e.to_string().starts_with("no RDMA devices"), "{e}");
            eprintln!("availability: {e}");
            // The list itself is empty, not an error.
            let list = ib::DeviceList::new(lib).expect("ibv_get_device_list");
            assert_eq!(list.kernel_support(), kernel);
            assert!(list.is_empty());
            assert_eq!(list.len(), 0);
            assert_eq!(list.iter().count(), 0);
        }
    }
}

#[test]
fn runtime_missing_library_is_named() {
    let e = IbLib::open_named("libibverbs-rds-test-missing.so.1", ffi::LIBRDMACM)
        .expect_err("no such library");
    match &e {
        IbUnavailable::LibraryMissing {
            library, package, ..
        } => {
            assert_eq!(library, "libibverbs-rds-test-missing.so.1");
            assert_eq!(*package, "libibverbs1 (and ibverbs-providers)");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(
        e.to_string()
            .starts_with("libibverbs-rds-test-missing.so.1 not found: install libibverbs1 (and ibverbs-providers)"),
        "{e}"
    );

    ensure_prereqs();
    let e = IbLib::open_named(ffi::LIBIBVERBS, "librdmacm-rds-test-missing.so.1")
        .expect_err("no such library");
    assert!(
        e.to_string()
            .starts_with("librdmacm-rds-test-missing.so.1 not found: install librdmacm1"),
        "{e}"
    );
}

#[test]
fn runtime_missing_symbol_is_named() {
    ensure_prereqs();
    // libc is a real library without our symbols: the first one is reported.
    let e = IbLib::open_named("libc.so.6", ffi::LIBRDMACM).expect_err("libc has no verbs");
    match &e {
        IbUnavailable::SymbolMissing {
            library, symbol, ..
        } => {
            assert_eq!(library, "libc.so.6");
            assert_eq!(*symbol, "ibv_get_device_list");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(
        e.to_string()
            .starts_with("libc.so.6 has no symbol ibv_get_device_list"),
        "{e}"
    );
}

#[test]
fn runtime_cm_channel_without_kernel_support_is_an_error() {
    ensure_prereqs();
    let lib = ib::lib().expect("libraries load");
    match ib::cm::EventChannel::new(lib) {
        Ok(ch) => {
            // rdma_ucm is loaded here: the channel works and is empty.
            assert!(Path::new("/dev/infiniband/rdma_cm").exists());
            assert!(ch.fd() >= 0);
            assert!(ch.get_event().expect("read the channel").is_none());
            let id = ch.create_id().expect("rdma_create_id");
            assert!(id.context().is_none(), "an unbound id has no device");
            assert_eq!(id.local_addr(), None);
        }
        Err(e) => {
            assert!(!Path::new("/dev/infiniband/rdma_cm").exists(), "{e}");
            assert_eq!(e.op, "rdma_create_event_channel");
        }
    }
}

#[test]
fn no_link_time_dependency_on_rdma_core() {
    // This test binary links rds-core: its dynamic section must not name the libraries.
    let exe = std::env::current_exe().expect("current exe");
    let out = Command::new("readelf").arg("-d").arg(&exe).output();
    let Ok(out) = out else {
        panic!("readelf (binutils) is needed; run {DEPS_SCRIPT} as root");
    };
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("(NEEDED)"), "a dynamic executable: {text}");
    assert!(!text.contains("libibverbs"), "{text}");
    assert!(!text.contains("librdmacm"), "{text}");
}

// ---------------------------------------------------------------------------------------------
// With a device: the whole safe layer over a real adapter (soft-RoCE in the lab guests).
// ---------------------------------------------------------------------------------------------

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use rds_core::ib::cm::{CmEvent, CmEventType, ConnParam, EventChannel};
use rds_core::ib::{
    Access, Cq, QpCap, QpInit, RecvWr, SendOp, SendWr, WcOpcode, WcStatus, WorkCompletion,
};

const STEP: Duration = Duration::from_secs(10);

fn next_event(ch: &EventChannel, what: &str) -> CmEvent {
    let deadline = Instant::now() + STEP;
    loop {
        if let Some(ev) = ch.get_event().expect("rdma_get_cm_event") {
            eprintln!("cm event {:?} status {} ({what})", ev.kind, ev.status);
            return ev;
        }
        assert!(
            Instant::now() < deadline,
            "no CM event within {STEP:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Waits for the channel event (after `req_notify`), then polls one completion.
fn next_completion(cq: &Cq, what: &str) -> WorkCompletion {
    let deadline = Instant::now() + STEP;
    let mut wc = [WorkCompletion::default(); 1];
    loop {
        if cq.poll(&mut wc).expect("poll_cq") == 1 {
            eprintln!(
                "wc {what}: {:?} {:?} len {}",
                wc[0].status(),
                wc[0].opcode(),
                wc[0].byte_len()
            );
            return wc[0];
        }
        assert!(
            Instant::now() < deadline,
            "no completion within {STEP:?} for {what}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn wait_channel(cq: &Cq, what: &str) {
    let deadline = Instant::now() + STEP;
    while !cq.get_event().expect("ibv_get_cq_event") {
        assert!(
            Instant::now() < deadline,
            "no channel event within {STEP:?} for {what}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// An IPv4 address of an active RoCE port (from its v4-mapped GIDs).
fn local_roce_ipv4(devs: &[ib::DeviceSummary]) -> Option<Ipv4Addr> {
    devs.iter()
        .filter(|d| d.usable_for_rds())
        .flat_map(|d| d.ports.iter())
        .flat_map(|p| p.gids.iter())
        .find_map(|g| g.to_ipv6().to_ipv4_mapped())
}

/// Run inside a lab guest that has `rxe0`:
/// `ib_layout-<hash> --ignored --nocapture device_loopback_send_rdma_write_read`.
/// Connects to itself through the connection manager, then sends (with and without
/// immediate data), RDMA-writes and RDMA-reads, checking every byte and completion.
#[test]
#[ignore = "needs an RDMA device (runs in the lab guests, see the doc comment)"]
fn device_loopback_send_rdma_write_read() {
    let lib = ib::lib().expect("libraries");
    let devs = ib::availability().expect("an RDMA device");
    for d in &devs {
        eprintln!(
            "device: {d} gids {:?}",
            d.ports.iter().map(|p| &p.gids).collect::<Vec<_>>()
        );
    }
    let ip = local_roce_ipv4(&devs).expect("an active RoCE port with an IPv4 GID");
    let addr = SocketAddr::new(IpAddr::V4(ip), 18999);

    let ch = EventChannel::new(lib).expect("event channel");
    let listener = ch.create_id().expect("listener id");
    listener.bind(addr).expect("rdma_bind_addr");
    listener.listen(4).expect("rdma_listen");
    assert_eq!(listener.local_addr(), Some(addr));

    let client = ch.create_id().expect("client id");
    client
        .resolve_addr(None, addr, Duration::from_secs(2))
        .expect("rdma_resolve_addr");
    let ev = next_event(&ch, "addr resolved");
    assert_eq!(
        (ev.kind, ev.status, ev.id),
        (CmEventType::AddrResolved, 0, client.handle())
    );
    let ctx = client.context().expect("bound to a device");
    eprintln!("client on {} port {}", ctx.device_name(), client.port_num());
    client
        .resolve_route(Duration::from_secs(2))
        .expect("rdma_resolve_route");
    let ev = next_event(&ch, "route resolved");
    assert_eq!((ev.kind, ev.status), (CmEventType::RouteResolved, 0));

    let pd = ctx.alloc_pd().expect("ibv_alloc_pd");
    let cap = QpCap {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 2,
        max_recv_sge: 2,
        max_inline_data: 0,
    };
    let c_scq = ctx.create_cq(32, true, 0).expect("client send cq");
    let c_rcq = ctx.create_cq(32, true, 0).expect("client recv cq");
    assert!(c_scq.fd().is_some() && c_scq.capacity() >= 32);
    let c_qp = client
        .create_qp(
            &pd,
            &QpInit {
                send_cq: &c_scq,
                recv_cq: &c_rcq,
                cap,
                sq_sig_all: false,
            },
        )
        .expect("rdma_create_qp (client)");
    assert!(c_qp.cap().max_send_wr >= 16);
    client
        .connect(&ConnParam {
            private_data: b"hello-req",
            responder_resources: 1,
            initiator_depth: 1,
            flow_control: false,
            retry_count: 7,
            rnr_retry_count: 7,
        })
        .expect("rdma_connect");

    let mut ev = next_event(&ch, "connect request");
    assert_eq!(ev.kind, CmEventType::ConnectRequest);
    assert_eq!(ev.listen_id, Some(listener.handle()));
    assert!(
        ev.private_data.starts_with(b"hello-req"),
        "{:?}",
        ev.private_data
    );
    assert_eq!(ev.conn.rnr_retry_count, 7);
    let server = ev.new_id.take().expect("the new id");
    assert_eq!(server.handle(), ev.id);
    assert_eq!(server.local_addr(), Some(addr));
    assert_eq!(server.peer_addr().map(|a| a.ip()), Some(IpAddr::V4(ip)));
    let sctx = server.context().expect("device of the request");
    assert_eq!(sctx.device_name(), ctx.device_name());
    let s_scq = sctx.create_cq(32, true, 0).expect("server send cq");
    let s_rcq = sctx.create_cq(32, true, 0).expect("server recv cq");
    let s_qp = server
        .create_qp(
            &pd,
            &QpInit {
                send_cq: &s_scq,
                recv_cq: &s_rcq,
                cap,
                sq_sig_all: false,
            },
        )
        .expect("rdma_create_qp (server)");

    // Receive buffers before accepting: two 64-byte slots.
    let s_recv = pd.reg_mr(128, Access::LOCAL_WRITE).expect("server recv mr");
    let sges = [s_recv.sge(0, 64).unwrap(), s_recv.sge(64, 64).unwrap()];
    s_qp.post_recv(&[
        RecvWr {
            wr_id: 100,
            sges: &sges[0..1],
        },
        RecvWr {
            wr_id: 101,
            sges: &sges[1..2],
        },
    ])
    .expect("post_recv");
    server
        .accept(&ConnParam {
            private_data: b"hello-rep",
            responder_resources: 1,
            initiator_depth: 1,
            flow_control: false,
            retry_count: 7,
            rnr_retry_count: 7,
        })
        .expect("rdma_accept");
    let mut established = 0;
    while established < 2 {
        let ev = next_event(&ch, "established");
        assert_eq!((ev.kind, ev.status), (CmEventType::Established, 0));
        if ev.id == client.handle() {
            assert!(
                ev.private_data.starts_with(b"hello-rep"),
                "{:?}",
                ev.private_data
            );
        } else {
            assert_eq!(ev.id, server.handle());
        }
        established += 1;
    }

    // SEND, solicited, through the channel.
    let mut c_mr = pd.reg_mr(256, Access::LOCAL_WRITE).expect("client mr");
    c_mr.write_at(0, b"ping").unwrap();
    s_rcq.req_notify(false).expect("req_notify");
    let sge = [c_mr.sge(0, 4).unwrap()];
    c_qp.post_send(&[SendWr {
        wr_id: 1,
        op: SendOp::Send,
        sges: &sge,
        signaled: true,
        solicited: true,
        fence: false,
    }])
    .expect("post_send");
    let wc = next_completion(&c_scq, "client send");
    assert_eq!(
        (wc.status(), wc.opcode(), wc.wr_id()),
        (WcStatus::Success, WcOpcode::Send, 1)
    );
    wait_channel(&s_rcq, "server recv");
    let wc = next_completion(&s_rcq, "server recv");
    assert_eq!(
        (wc.status(), wc.opcode(), wc.wr_id(), wc.byte_len()),
        (WcStatus::Success, WcOpcode::Recv, 100, 4)
    );
    assert!(wc.is_recv());
    assert_eq!(wc.imm_data(), None);
    assert_eq!(wc.qp_num(), s_qp.qp_num());
    let mut got = [0u8; 4];
    s_recv.read_at(0, &mut got).unwrap();
    assert_eq!(&got, b"ping");

    // SEND with immediate data.
    c_mr.write_at(8, b"imm!").unwrap();
    let sge = [c_mr.sge(8, 4).unwrap()];
    c_qp.post_send(&[SendWr {
        wr_id: 2,
        op: SendOp::SendWithImm(0x1234_5678),
        sges: &sge,
        signaled: true,
        solicited: false,
        fence: false,
    }])
    .expect("post_send imm");
    assert!(next_completion(&c_scq, "client send imm").is_success());
    let wc = next_completion(&s_rcq, "server recv imm");
    assert_eq!(
        (wc.wr_id(), wc.byte_len(), wc.imm_data()),
        (101, 4, Some(0x1234_5678))
    );
    s_recv.read_at(64, &mut got).unwrap();
    assert_eq!(&got, b"imm!");

    // RDMA WRITE into the server's region, then RDMA READ it back into the client's.
    let mut target = pd
        .reg_mr(
            4096,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
        )
        .expect("target mr");
    target.write_at(2048, b"server-owned-bytes").unwrap();
    let payload: Vec<u8> = (0..100u8).collect();
    c_mr.write_at(16, &payload).unwrap();
    let sge = [c_mr.sge(16, 100).unwrap()];
    c_qp.post_send(&[SendWr {
        wr_id: 3,
        op: SendOp::RdmaWrite {
            remote_addr: target.addr() + 10,
            rkey: target.rkey(),
        },
        sges: &sge,
        signaled: true,
        solicited: false,
        fence: false,
    }])
    .expect("post rdma write");
    let wc = next_completion(&c_scq, "rdma write");
    assert_eq!(
        (wc.status(), wc.opcode(), wc.wr_id()),
        (WcStatus::Success, WcOpcode::RdmaWrite, 3)
    );
    let mut back = vec![0u8; 100];
    target.read_at(10, &mut back).unwrap();
    assert_eq!(back, payload);
    let mut zero = [0xffu8; 10];
    target.read_at(0, &mut zero).unwrap();
    assert_eq!(zero, [0u8; 10], "bytes before the write untouched");

    let sge = [c_mr.sge(128, 18).unwrap()];
    c_qp.post_send(&[SendWr {
        wr_id: 4,
        op: SendOp::RdmaRead {
            remote_addr: target.addr() + 2048,
            rkey: target.rkey(),
        },
        sges: &sge,
        signaled: true,
        solicited: false,
        fence: false,
    }])
    .expect("post rdma read");
    let wc = next_completion(&c_scq, "rdma read");
    assert_eq!(
        (wc.status(), wc.opcode(), wc.wr_id(), wc.byte_len()),
        (WcStatus::Success, WcOpcode::RdmaRead, 4, 18)
    );
    let mut read = [0u8; 18];
    c_mr.read_at(128, &mut read).unwrap();
    assert_eq!(&read, b"server-owned-bytes");

    // A bad rkey is a remote access error, not a crash.
    c_qp.post_send(&[SendWr {
        wr_id: 5,
        op: SendOp::RdmaWrite {
            remote_addr: target.addr(),
            rkey: target.rkey() ^ 0x5a5a_0000,
        },
        sges: &sge,
        signaled: true,
        solicited: false,
        fence: false,
    }])
    .expect("post bad write");
    let wc = next_completion(&c_scq, "bad rkey");
    assert_eq!(wc.wr_id(), 5);
    assert_eq!(wc.status(), WcStatus::RemAccessErr);

    // The error moved the QPs to the error state; tear the connection down. The passive side
    // answers the DREQ with its own rdma_disconnect (the DREP), as RDS does.
    client.disconnect().expect("rdma_disconnect (client)");
    let deadline = Instant::now() + STEP;
    let (mut client_down, mut server_down) = (false, false);
    while !(client_down && server_down) {
        assert!(
            Instant::now() < deadline,
            "disconnect events: client {client_down}, server {server_down}"
        );
        let Some(ev) = ch.get_event().expect("events") else {
            std::thread::sleep(Duration::from_millis(1));
            continue;
        };
        eprintln!("cm event {:?} for {:?}", ev.kind, ev.id);
        if ev.kind != CmEventType::Disconnected {
            continue;
        }
        if ev.id == server.handle() {
            server_down = true;
            server.disconnect().expect("rdma_disconnect (server)");
        } else {
            assert_eq!(ev.id, client.handle());
            client_down = true;
        }
    }
    s_qp.set_error_state().expect("modify to ERR");
    // Server receive queue is empty (both receives consumed): nothing is flushed.
    let mut wcs = [WorkCompletion::default(); 4];
    assert_eq!(s_rcq.poll(&mut wcs).expect("poll"), 0);
    // Drop order is enforced by the handles: QPs first (they hold CQs, PD and ids).
    drop(c_qp);
    drop(s_qp);
    drop(server);
    drop(client);
    drop(listener);
}
