-- rds.lua: Wireshark/tshark dissector for Linux RDS (Reliable Datagram Sockets).
--
-- Part of rds-tools (GPL-2.0-only OR BSD-2-Clause). See README.md next to this file for how
-- to load it.
--
-- Decodes the 48-byte RDS header (net/rds/rds.h), its extension headers with the kernel's
-- implied-length rules, header checksums, congestion maps and payloads, on:
--   * RDS/TCP: TCP port 16385, PDUs reassembled with dissect_tcp_pdus;
--   * RDS over InfiniBand / RoCE: a heuristic on the "infiniband.payload" list.
--
-- Portable across the Lua versions Wireshark embeds (5.1 to 5.4): no bit operators, no bit
-- library, no goto, no integer division operator; bits are tested with arithmetic.

local HDR_LEN = 48
local EXT_OFF = 32
local EXT_SPACE = 16
local MAX_MSG_SIZE = 1048576 -- RDS_MAX_MSG_SIZE
local CONG_MAP_BYTES = 8192 -- RDS_CONG_MAP_BYTES
local PROBE_PORT = 1 -- RDS_FLAG_PROBE_PORT
local DEFAULT_TCP_PORT = 16385 -- RDS_TCP_PORT
local ARROW = "\226\134\146" -- U+2192 in UTF-8

local ok_proto, rds = pcall(Proto, "rds", "Reliable Datagram Sockets")
if not ok_proto then
    error("rds.lua: cannot register protocol 'rds' (another plugin, for example a Radio Data "
        .. "System dissector, may already use that name): " .. tostring(rds))
end

---------------------------------------------------------------------------------------------
-- Fields
---------------------------------------------------------------------------------------------

local ext_names = {
    [0] = "NONE",
    [1] = "VERSION",
    [2] = "RDMA",
    [3] = "RDMA_DEST",
    [4] = "RDMA_BYTES",
    [5] = "NPATHS",
    [6] = "GEN_NUM",
    [7] = "CAP_BITS (UEK)",
    [8] = "SPORT_IDX",
    [9] = "CSUM (UEK)",
    [10] = "Unknown", [11] = "Unknown", [12] = "Unknown",
    [13] = "Unknown", [14] = "Unknown", [15] = "Unknown",
}

local rflags_names = { [1] = "RDMA write", [2] = "RDMA read" }

local f = {
    seq = ProtoField.uint64("rds.seq", "Sequence", base.DEC),
    ack = ProtoField.uint64("rds.ack", "Ack", base.DEC),
    len = ProtoField.uint32("rds.len", "Payload length", base.DEC),
    sport = ProtoField.uint16("rds.sport", "Source port", base.DEC),
    dport = ProtoField.uint16("rds.dport", "Destination port", base.DEC),
    flags = ProtoField.uint8("rds.flags", "Flags", base.HEX),
    fl_cong = ProtoField.bool("rds.flags.cong_bitmap", "CONG_BITMAP", 8, nil, 0x01),
    fl_ackreq = ProtoField.bool("rds.flags.ack_required", "ACK_REQUIRED", 8, nil, 0x02),
    fl_retrans = ProtoField.bool("rds.flags.retransmitted", "RETRANSMITTED", 8, nil, 0x04),
    fl_hbping = ProtoField.bool("rds.flags.hb_ping", "HB_PING (UEK)", 8, nil, 0x08),
    fl_hbpong = ProtoField.bool("rds.flags.hb_pong", "HB_PONG (UEK)", 8, nil, 0x10),
    fl_extext = ProtoField.bool("rds.flags.exthdr_extension", "EXTHDR_EXTENSION", 8, nil, 0x20),
    credit = ProtoField.uint8("rds.credit", "Credit", base.DEC),
    padding = ProtoField.bytes("rds.padding", "Padding"),
    csum = ProtoField.uint16("rds.csum", "Header checksum", base.HEX),
    csum_good = ProtoField.bool("rds.csum.good", "Header checksum good"),
    exthdr = ProtoField.bytes("rds.exthdr", "Extension header space"),
    ext_type = ProtoField.uint8("rds.exthdr.type", "Extension type", base.DEC, ext_names),
    ext_version = ProtoField.uint32("rds.exthdr.version", "Protocol version", base.HEX),
    ext_rkey = ProtoField.uint32("rds.exthdr.rdma_rkey", "RDMA R_Key", base.HEX),
    ext_offset = ProtoField.uint32("rds.exthdr.rdma_offset", "RDMA offset", base.HEX),
    ext_rdma_bytes = ProtoField.uint32("rds.exthdr.rdma_bytes", "RDMA byte count", base.DEC),
    ext_rdma_rflags = ProtoField.uint8("rds.exthdr.rdma_rflags", "RDMA direction", base.HEX,
        rflags_names),
    ext_npaths = ProtoField.uint16("rds.exthdr.npaths", "Number of paths", base.DEC),
    ext_gen = ProtoField.uint32("rds.exthdr.gen_num", "Generation number", base.DEC),
    ext_sport_idx = ProtoField.uint8("rds.exthdr.sport_idx", "Source port index", base.DEC),
    ext_data = ProtoField.bytes("rds.exthdr.data", "Extension data"),
    cong_map = ProtoField.bytes("rds.cong_map", "Congestion bitmap"),
    cong_count = ProtoField.uint32("rds.cong_map.count", "Congested ports", base.DEC),
    cong_port = ProtoField.uint16("rds.cong_map.port", "Congested port", base.DEC),
    payload = ProtoField.bytes("rds.payload", "Payload"),
}

rds.fields = {
    f.seq, f.ack, f.len, f.sport, f.dport, f.flags,
    f.fl_cong, f.fl_ackreq, f.fl_retrans, f.fl_hbping, f.fl_hbpong, f.fl_extext,
    f.credit, f.padding, f.csum, f.csum_good,
    f.exthdr, f.ext_type, f.ext_version, f.ext_rkey, f.ext_offset, f.ext_rdma_bytes,
    f.ext_rdma_rflags, f.ext_npaths, f.ext_gen, f.ext_sport_idx, f.ext_data,
    f.cong_map, f.cong_count, f.cong_port, f.payload,
}

local ef = {
    bad_csum = ProtoExpert.new("rds.csum.bad", "Bad RDS header checksum",
        expert.group.CHECKSUM, expert.severity.ERROR),
    truncated = ProtoExpert.new("rds.truncated", "RDS frame cut short in the capture",
        expert.group.UNDECODED, expert.severity.NOTE),
    ext_invalid = ProtoExpert.new("rds.exthdr.invalid",
        "Extension type 16 or above: the kernel stops parsing here",
        expert.group.PROTOCOL, expert.severity.WARN),
    ext_overflow = ProtoExpert.new("rds.exthdr.overflow",
        "Extension body does not fit in the 16-byte area: the kernel stops parsing here",
        expert.group.PROTOCOL, expert.severity.WARN),
    padding = ProtoExpert.new("rds.padding.nonzero", "h_padding is not zero",
        expert.group.PROTOCOL, expert.severity.WARN),
    long_len = ProtoExpert.new("rds.len.too_long",
        "h_len exceeds RDS_MAX_MSG_SIZE (1 MiB); not reassembled",
        expert.group.MALFORMED, expert.severity.WARN),
    cong_len = ProtoExpert.new("rds.cong_map.bad_len",
        "Congestion map length is not 8192 (RDS/TCP receivers ignore it)",
        expert.group.PROTOCOL, expert.severity.WARN),
    retrans = ProtoExpert.new("rds.retransmitted", "Retransmitted RDS message",
        expert.group.SEQUENCE, expert.severity.NOTE),
}

rds.experts = {
    ef.bad_csum, ef.truncated, ef.ext_invalid, ef.ext_overflow, ef.padding, ef.long_len,
    ef.cong_len, ef.retrans,
}

---------------------------------------------------------------------------------------------
-- Preferences
---------------------------------------------------------------------------------------------

rds.prefs.tcp_port = Pref.uint("RDS/TCP port", DEFAULT_TCP_PORT,
    "TCP port of RDS/TCP listeners (RDS_TCP_PORT, 16385)")
rds.prefs.uek_ext_lengths = Pref.bool("UEK extension lengths", false,
    "Give extension types 7 (CAP_BITS) and 9 (CSUM) 4 and 8 body bytes, as Oracle UEK "
    .. "kernels do. Mainline Linux gives them none.")
rds.prefs.ib_require_good_csum = Pref.bool("IB heuristic: require a valid header checksum", true,
    "Claim an InfiniBand/RoCE payload as RDS only if its header checksum is 0 or valid. "
    .. "Turn off to see frames with bad checksums (flagged by expert info) as RDS.")
rds.prefs.max_ports = Pref.uint("Congested ports to list", 1024,
    "Largest number of rds.cong_map.port items added per congestion map")

---------------------------------------------------------------------------------------------
-- Helpers
---------------------------------------------------------------------------------------------

-- Whether bit value `bit` (a power of two) is set in `v`.
local function has_bit(v, bit)
    return math.floor(v / bit) % 2 == 1
end

-- Implied body length of an extension type below 16 (rds_exthdr_size[]); nil for >= 16.
local function ext_body_len(ty)
    if ty >= 16 then return nil end
    if ty == 1 or ty == 2 or ty == 6 then return 4 end
    if ty == 3 or ty == 4 then return 8 end
    if ty == 5 then return 2 end
    if ty == 8 then return 1 end
    if rds.prefs.uek_ext_lengths then
        if ty == 7 then return 4 end
        if ty == 9 then return 8 end
    end
    return 0
end

-- ip_fast_csum over the 48 header bytes gives 0 (the folded sum is 0xFFFF).
local function header_csum_ok(tvb)
    local sum = 0
    for i = 0, HDR_LEN - 2, 2 do
        sum = sum + tvb(i, 2):uint()
    end
    while sum > 0xFFFF do
        sum = (sum % 65536) + math.floor(sum / 65536)
    end
    return sum == 0xFFFF
end

-- Value of the last occurrence of a field in the packet (innermost header), or nil.
local function last_value(field)
    local all = { field() }
    local n = #all
    if n == 0 then return nil end
    return all[n].value
end

local function field_extractor(name)
    local ok, v = pcall(Field.new, name)
    if ok then return v end
    return nil
end

local fx_opcode = field_extractor("infiniband.bth.opcode")
local fx_padcnt = field_extractor("infiniband.bth.padcnt")
local fx_destqp = field_extractor("infiniband.bth.destqp")
local fx_lrh_pktlen = field_extractor("infiniband.lrh.pktlen")

-- Per-capture state: the byte offset of each IB congestion-map fragment within its map.
local cong_progress = {}
local cong_offset_of_frame = {}

function rds.init()
    cong_progress = {}
    cong_offset_of_frame = {}
end

-- Puts one frame's summary in the Info column: replaces the lower layer's text for the
-- first RDS frame of a packet and appends the others. TCP may call the dissector several
-- times per packet (a reassembled PDU, then the PDUs after it), so "first" is read from the
-- Protocol column, which only RDS sets to "RDS".
local function add_info(pinfo, text)
    if tostring(pinfo.cols.protocol) == "RDS" then
        pinfo.cols.info:append(", " .. text)
    else
        pinfo.cols.protocol = "RDS"
        pinfo.cols.info:set(text)
    end
end

---------------------------------------------------------------------------------------------
-- One RDS frame (TCP PDU or IB fragment)
---------------------------------------------------------------------------------------------

-- Walks h_exthdr like rds_message_next_extension. Returns a short summary for Info.
local function dissect_exthdrs(tvb, tree)
    local et = tree:add(f.exthdr, tvb(EXT_OFF, EXT_SPACE))
    local summary = {}
    local pos = 0
    while pos < EXT_SPACE do
        local at = EXT_OFF + pos
        local ty = tvb(at, 1):uint()
        if ty == 0 then break end
        local len = ext_body_len(ty)
        if len == nil then
            local it = et:add(f.ext_type, tvb(at, 1))
            it:add_proto_expert_info(ef.ext_invalid)
            break
        end
        if pos + 1 + len > EXT_SPACE then
            local it = et:add(f.ext_type, tvb(at, 1))
            it:add_proto_expert_info(ef.ext_overflow)
            break
        end
        local name = ext_names[ty] or "Unknown"
        local sub = et:add(tvb(at, 1 + len), string.format("Extension: %s (%d)", name, ty))
        sub:add(f.ext_type, tvb(at, 1))
        local b = at + 1
        if ty == 1 then
            local v = tvb(b, 4):uint()
            local it = sub:add(f.ext_version, tvb(b, 4))
            it:append_text(string.format(" (%d.%d)", math.floor(v / 256), v % 256))
            summary[#summary + 1] = string.format("version=%d.%d", math.floor(v / 256), v % 256)
        elseif ty == 2 then
            sub:add(f.ext_rkey, tvb(b, 4))
        elseif ty == 3 then
            sub:add(f.ext_rkey, tvb(b, 4))
            sub:add(f.ext_offset, tvb(b + 4, 4))
        elseif ty == 4 then
            sub:add(f.ext_data, tvb(b, 8))
            sub:add(f.ext_rdma_bytes, tvb(b, 4))
            sub:add(f.ext_rdma_rflags, tvb(b + 4, 1))
        elseif ty == 5 then
            sub:add(f.ext_npaths, tvb(b, 2))
            summary[#summary + 1] = string.format("npaths=%d", tvb(b, 2):uint())
        elseif ty == 6 then
            sub:add(f.ext_gen, tvb(b, 4))
            summary[#summary + 1] = string.format("gen=%d", tvb(b, 4):uint())
        elseif ty == 8 then
            sub:add(f.ext_data, tvb(b, 1))
            sub:add(f.ext_sport_idx, tvb(b, 1))
            summary[#summary + 1] = "sport_idx"
        elseif len > 0 then
            sub:add(f.ext_data, tvb(b, len))
        end
        pos = pos + 1 + len
    end
    return table.concat(summary, " ")
end

-- Lists the congested ports of `cap` captured map bytes starting at tvb offset `off`, whose
-- first byte is byte `base` of the 8192-byte map. Returns the number of congested ports.
local function dissect_cong_map(tvb, tree, off, cap, base)
    local item = tree:add(f.cong_map, tvb(off, cap))
    local usable = cap
    if base + usable > CONG_MAP_BYTES then usable = CONG_MAP_BYTES - base end
    if usable < 0 then usable = 0 end
    local raw = tvb:raw(off, usable)
    local limit = rds.prefs.max_ports
    local count = 0
    local listed = {}
    for i = 1, #raw do
        local byte = raw:byte(i)
        if byte ~= 0 then
            for bit = 0, 7 do
                if byte % 2 == 1 then
                    count = count + 1
                    if #listed < limit then
                        listed[#listed + 1] = { i - 1, (base + i - 1) * 8 + bit }
                    end
                end
                byte = math.floor(byte / 2)
            end
        end
    end
    local c = item:add(f.cong_count, count)
    c:set_generated()
    for _, p in ipairs(listed) do
        local it = item:add(f.cong_port, tvb(off + p[1], 1), p[2])
        it:set_generated()
    end
    if count > #listed then
        item:add(string.format("[%d more congested ports not listed]", count - #listed))
    end
    return count
end

-- Dissects one RDS frame at the start of `tvb`. `ib` is nil for TCP, else a table with
-- `pad` (IB pad bytes at the end of the buffer) and `key` (sender/QP, for map offsets).
local function dissect_frame(tvb, pinfo, tree, ib)
    local cap = tvb:len()
    local rep = tvb:reported_len()

    local t
    if cap > 0 then
        t = tree:add(rds, tvb(0, cap))
    else
        t = tree:add(rds, tvb)
    end
    if cap < HDR_LEN then
        -- Only happens on snapped captures with fewer than 48 header bytes.
        local fields = {
            { f.seq, 0, 8 }, { f.ack, 8, 8 }, { f.len, 16, 4 }, { f.sport, 20, 2 },
            { f.dport, 22, 2 }, { f.flags, 24, 1 }, { f.credit, 25, 1 },
            { f.padding, 26, 4 }, { f.csum, 30, 2 },
        }
        for _, fd in ipairs(fields) do
            if fd[2] + fd[3] <= cap then t:add(fd[1], tvb(fd[2], fd[3])) end
        end
        t:add_proto_expert_info(ef.truncated,
            string.format("RDS header cut short: %d of 48 bytes captured", cap))
        add_info(pinfo, "RDS [header cut short]")
        return
    end

    local seq = tvb(0, 8):uint64()
    local ack = tvb(8, 8):uint64()
    local h_len = tvb(16, 4):uint()
    local sport = tvb(20, 2):uint()
    local dport = tvb(22, 2):uint()
    local flags = tvb(24, 1):uint()
    local csum = tvb(30, 2):uint()

    t:add(f.seq, tvb(0, 8))
    t:add(f.ack, tvb(8, 8))
    local len_item = t:add(f.len, tvb(16, 4))
    t:add(f.sport, tvb(20, 2))
    t:add(f.dport, tvb(22, 2))
    local ft = t:add(f.flags, tvb(24, 1))
    ft:add(f.fl_cong, tvb(24, 1))
    ft:add(f.fl_ackreq, tvb(24, 1))
    ft:add(f.fl_retrans, tvb(24, 1))
    ft:add(f.fl_hbping, tvb(24, 1))
    ft:add(f.fl_hbpong, tvb(24, 1))
    ft:add(f.fl_extext, tvb(24, 1))
    t:add(f.credit, tvb(25, 1))
    local pad_item = t:add(f.padding, tvb(26, 4))
    if tvb(26, 4):uint() ~= 0 then pad_item:add_proto_expert_info(ef.padding) end

    local csum_item = t:add(f.csum, tvb(30, 2))
    local csum_bad = false
    if csum == 0 then
        csum_item:append_text(" [not used]")
    else
        local good = header_csum_ok(tvb)
        csum_item:append_text(good and " [correct]" or " [incorrect]")
        local g = csum_item:add(f.csum_good, tvb(30, 2), good)
        g:set_generated()
        if not good then
            csum_bad = true
            csum_item:add_proto_expert_info(ef.bad_csum)
        end
    end

    local ext_summary = dissect_exthdrs(tvb, t)

    -- Body: h_len bytes over TCP; over IB this fragment's bytes (buffer minus pad).
    local body_rep
    if ib then
        body_rep = rep - HDR_LEN - ib.pad
        if body_rep < 0 then body_rep = 0 end
    else
        body_rep = rep - HDR_LEN
        if body_rep > h_len then body_rep = h_len end
    end
    local body_cap = cap - HDR_LEN
    if ib and ib.tail > 0 then body_cap = body_cap - ib.tail end
    if body_cap < 0 then body_cap = 0 end
    if body_cap > body_rep then body_cap = body_rep end

    local is_cong = has_bit(flags, 0x01)
    local congested = nil
    if body_cap > 0 then
        if is_cong then
            local base = 0
            if ib then
                if not pinfo.visited then
                    local done = cong_progress[ib.key] or 0
                    cong_offset_of_frame[pinfo.number] = done
                    done = done + body_rep
                    if done >= h_len then done = 0 end
                    cong_progress[ib.key] = done
                end
                base = cong_offset_of_frame[pinfo.number] or 0
            end
            congested = dissect_cong_map(tvb, t, HDR_LEN, body_cap, base)
        else
            t:add(f.payload, tvb(HDR_LEN, body_cap))
        end
    end
    if is_cong and h_len ~= CONG_MAP_BYTES then len_item:add_proto_expert_info(ef.cong_len) end
    if not ib and rep < HDR_LEN + h_len then
        if h_len > MAX_MSG_SIZE then
            len_item:add_proto_expert_info(ef.long_len)
        end
    end
    local truncated = body_cap < body_rep
    if truncated then
        t:add_proto_expert_info(ef.truncated,
            string.format("RDS frame cut short: %d of %d payload bytes captured", body_cap, body_rep))
    end
    if has_bit(flags, 0x04) then ft:add_proto_expert_info(ef.retrans) end

    -- Info column.
    local text = string.format("RDS %d %s %d seq=%s len=%d", sport, ARROW, dport,
        tostring(seq), h_len)
    local ack_only = false
    if is_cong then
        text = text .. " CONG_MAP"
        if congested then text = text .. string.format(" congested=%d", congested) end
    elseif sport == PROBE_PORT and dport == 0 then
        text = text .. " PROBE PING"
    elseif sport == 0 and dport == PROBE_PORT then
        text = text .. " PROBE PONG"
    elseif dport == 0 and sport ~= 0 then
        text = text .. " PING"
    elseif sport == 0 and dport ~= 0 and h_len == 0 then
        text = text .. " PONG"
    elseif sport == 0 and dport == 0 and h_len == 0 and tostring(seq) == "0" then
        text = text .. " ACK-ONLY"
        ack_only = true
    end
    if ext_summary ~= "" then text = text .. " " .. ext_summary end
    if ack_only or tostring(ack) ~= "0" then text = text .. " ack=" .. tostring(ack) end
    if has_bit(flags, 0x08) then text = text .. " HB_PING" end
    if has_bit(flags, 0x10) then text = text .. " HB_PONG" end
    if has_bit(flags, 0x02) then text = text .. " ACK_REQ" end
    if has_bit(flags, 0x04) then text = text .. " [RETRANSMITTED]" end
    if csum_bad then text = text .. " [BAD CHECKSUM]" end
    if truncated then text = text .. " [truncated]" end
    add_info(pinfo, text)
end

---------------------------------------------------------------------------------------------
-- RDS/TCP
---------------------------------------------------------------------------------------------

-- PDU length for dissect_tcp_pdus: 48 + h_len. When h_len is not captured (snapped segment)
-- or implausible, the PDU is the rest of the segment, so decoding resumes after it.
local function get_pdu_len(tvb, pinfo, offset)
    if tvb:len() - offset >= 20 then
        local h_len = tvb(offset + 16, 4):uint()
        if h_len <= MAX_MSG_SIZE then
            return HDR_LEN + h_len
        end
    end
    local rest = tvb:reported_length_remaining(offset)
    if rest < HDR_LEN then rest = HDR_LEN end
    return rest
end

local function dissect_tcp_pdu(tvb, pinfo, tree)
    dissect_frame(tvb, pinfo, tree, nil)
    return tvb:reported_len()
end

local dissect_ib_payload -- defined below

function rds.dissector(tvb, pinfo, tree)
    if fx_opcode and last_value(fx_opcode) ~= nil then
        -- Reached through "Decode As" on an InfiniBand payload.
        dissect_ib_payload(tvb, pinfo, tree)
        return tvb:reported_len()
    end
    dissect_tcp_pdus(tvb, tree, HDR_LEN, get_pdu_len, dissect_tcp_pdu, true)
    return tvb:reported_len()
end

local tcp_table = DissectorTable.get("tcp.port")
local registered_port = rds.prefs.tcp_port
tcp_table:add(registered_port, rds)

function rds.prefs_changed()
    if rds.prefs.tcp_port ~= registered_port then
        tcp_table:remove(registered_port, rds)
        registered_port = rds.prefs.tcp_port
        tcp_table:add(registered_port, rds)
    end
end

---------------------------------------------------------------------------------------------
-- RDS over InfiniBand / RoCE
---------------------------------------------------------------------------------------------

-- All extension types up to the first NONE are ones this dissector knows (1..9), and the
-- walk ends within the area.
local function exthdrs_known(tvb)
    local pos = 0
    while pos < EXT_SPACE do
        local ty = tvb(EXT_OFF + pos, 1):uint()
        if ty == 0 then return true end
        if ty > 9 then return false end
        local len = ext_body_len(ty)
        if pos + 1 + len > EXT_SPACE then return false end
        pos = pos + 1 + len
    end
    return true
end

-- One IB SEND payload: an RDS fragment followed by the BTH pad bytes.
dissect_ib_payload = function(tvb, pinfo, tree)
    local pad = 0
    if fx_padcnt then pad = last_value(fx_padcnt) or 0 end
    if pad > tvb:reported_len() - HDR_LEN then pad = 0 end
    local qp = ""
    if fx_destqp then qp = tostring(last_value(fx_destqp) or "") end
    local key = tostring(pinfo.src) .. ">" .. tostring(pinfo.dst) .. "/" .. qp
    -- The IB dissector passes a payload on only when the packet its LRH declares was
    -- captured whole. A payload cut short is therefore a packet shorter than the one on the
    -- wire (rds-trace writes a snapped fragment so): its captured bytes end with that
    -- packet's pad, ICRC and (native IB, which has an LRH) VCRC.
    local tail = 0
    if tvb:len() < tvb:reported_len() then
        tail = pad + 4
        if fx_lrh_pktlen and last_value(fx_lrh_pktlen) ~= nil then tail = tail + 2 end
    end
    dissect_frame(tvb, pinfo, tree, { pad = pad, key = key, tail = tail })
end

local function heur_ib(tvb, pinfo, tree)
    -- 1: a whole header.
    if tvb:len() < HDR_LEN then return false end
    -- 2: RC SEND First / Only / Only with Immediate (not RDMA WRITE data). The opcode comes
    -- from a field extractor, which has no value when no protocol tree is built (tshark's
    -- first pass with -2). Then the other checks decide: refusing would let another
    -- heuristic (rpcordma) claim the queue pair's conversation for the whole capture.
    if fx_opcode then
        local op = last_value(fx_opcode)
        if op ~= nil and op ~= 0x00 and op ~= 0x04 and op ~= 0x05 then return false end
    end
    -- 3: h_len <= 1 MiB.
    if tvb(16, 4):uint() > MAX_MSG_SIZE then return false end
    -- 4: zero padding.
    if tvb(26, 4):uint() ~= 0 then return false end
    -- 5: checksum 0 or valid (unless the preference lets bad ones through).
    if rds.prefs.ib_require_good_csum and tvb(30, 2):uint() ~= 0 and not header_csum_ok(tvb) then
        return false
    end
    -- 6: known extension types only.
    if not exthdrs_known(tvb) then return false end

    dissect_ib_payload(tvb, pinfo, tree)
    return true
end

rds:register_heuristic("infiniband.payload", heur_ib)

-- "Decode As" for IB payloads the heuristic rejects (Decode As... > Infiniband Payload).
pcall(function()
    DissectorTable.get("infiniband"):add_for_decode_as(rds)
end)
