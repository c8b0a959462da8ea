#include "proto/store/request.hpp"

#include "proto/store/byte_codec.hpp"

namespace meshrun::proto {
namespace {

// Reads the fields of each query in order; any step may need more bytes or hit a limit. In measure mode
// it only checks that the whole request is there, copying nothing: a request with 100k keys arrives in
// many reads, and parsing it whole on each would be quadratic.
class RequestParser {
 public:
  RequestParser(std::string_view buffer, const Limits& limits, bool measure)
      : reader_(buffer), limits_(limits), measure_(measure) {}

  DecodeResult parse(Request& out) {
    uint8_t type = 0;
    if (!step(reader_.u8(type), "query type")) return result_;
    const char* name = query_name(type);
    if (name == nullptr) return malformed("unknown query type " + std::to_string(type));
    if (!measure_) out = Request{};
    out.type = static_cast<QueryType>(type);
    if (!parse_fields(out)) return result_;
    result_.status = DecodeStatus::kComplete;
    result_.consumed = reader_.position();
    return result_;
  }

 private:
  bool parse_fields(Request& out) {
    switch (out.type) {
      case QueryType::kValidate: {
        uint32_t magic = 0;
        if (!step(reader_.u32(magic), "validation magic")) return false;
        out.number = magic;
        return true;
      }
      case QueryType::kPing: {
        uint32_t nonce = 0;
        if (!step(reader_.u32(nonce), "ping nonce")) return false;
        out.number = nonce;
        return true;
      }
      case QueryType::kSet:
      case QueryType::kAppend:
      case QueryType::kQueuePush: return key(out) && value(out);
      case QueryType::kCompareSet: return key(out) && value(out) && value(out);
      case QueryType::kGet:
      case QueryType::kDeleteKey:
      case QueryType::kQueueLen:
      case QueryType::kQueuePop: return key(out);
      case QueryType::kAdd: {
        if (!key(out)) return false;
        return step(reader_.i64(out.number), "add delta");
      }
      case QueryType::kCheck:
      case QueryType::kWait:
      case QueryType::kMultiGet: return key_vector(out);
      case QueryType::kMultiSet: {
        uint64_t count = 0;
        if (!count_field(count)) return false;
        for (uint64_t i = 0; i < count; ++i) {
          if (!key(out) || !value(out)) return false;
        }
        return true;
      }
      case QueryType::kBarrier: {
        // key, int64 world size (participants to wait for)
        if (!key(out)) return false;
        return step(reader_.i64(out.number), "barrier size");
      }
      case QueryType::kGetNumKeys:
      case QueryType::kCancelWait:
      case QueryType::kListKeys: return true;
      case QueryType::kMeshrun: return value(out);
    }
    return false;
  }

  bool key(Request& out) {
    if (measure_) return step(reader_.skip_string(limits_.max_key_bytes), "key");
    std::string k;
    if (!step(reader_.string(k, limits_.max_key_bytes), "key")) return false;
    out.keys.push_back(std::move(k));
    return true;
  }
  bool value(Request& out) {
    if (measure_) return step(reader_.skip_string(limits_.max_value_bytes), "value");
    std::string v;
    if (!step(reader_.string(v, limits_.max_value_bytes), "value")) return false;
    out.values.push_back(std::move(v));
    return true;
  }
  bool count_field(uint64_t& count) {
    if (!step(reader_.u64(count), "key count")) return false;
    if (count > limits_.max_key_count) {
      malformed("key count " + std::to_string(count) + " exceeds the limit of " +
                std::to_string(limits_.max_key_count));
      return false;
    }
    return true;
  }
  bool key_vector(Request& out) {
    uint64_t count = 0;
    if (!count_field(count)) return false;
    if (!measure_) out.keys.reserve(static_cast<size_t>(count));
    for (uint64_t i = 0; i < count; ++i) {
      if (!key(out)) return false;
    }
    return true;
  }
  bool step(ReadStatus status, const char* what) {
    if (status == ReadStatus::kOk) return true;
    if (status == ReadStatus::kNeedMore) {
      result_.status = DecodeStatus::kNeedMore;
    } else {
      malformed(std::string(what) + " is longer than the limit (key " + std::to_string(limits_.max_key_bytes) +
                " bytes, value " + std::to_string(limits_.max_value_bytes) + " bytes)");
    }
    return false;
  }
  DecodeResult malformed(std::string why) {
    result_.status = DecodeStatus::kMalformed;
    result_.error = std::move(why);
    return result_;
  }

  ByteReader reader_;
  const Limits& limits_;
  bool measure_;
  DecodeResult result_;
};

}  // namespace

const char* query_name(uint8_t type) {
  switch (static_cast<QueryType>(type)) {
    case QueryType::kValidate: return "validate";
    case QueryType::kSet: return "set";
    case QueryType::kCompareSet: return "compare_set";
    case QueryType::kGet: return "get";
    case QueryType::kAdd: return "add";
    case QueryType::kCheck: return "check";
    case QueryType::kWait: return "wait";
    case QueryType::kGetNumKeys: return "num_keys";
    case QueryType::kDeleteKey: return "delete_key";
    case QueryType::kAppend: return "append";
    case QueryType::kMultiGet: return "multi_get";
    case QueryType::kMultiSet: return "multi_set";
    case QueryType::kCancelWait: return "cancel_wait";
    case QueryType::kPing: return "ping";
    case QueryType::kQueuePush: return "queue_push";
    case QueryType::kQueuePop: return "queue_pop";
    case QueryType::kQueueLen: return "queue_len";
    case QueryType::kListKeys: return "list_keys";
    case QueryType::kBarrier: return "barrier";
    case QueryType::kMeshrun: return "meshrun";
  }
  return nullptr;
}

DecodeResult decode_request(std::string_view buffer, const Limits& limits, Request& out) {
  Request scratch;  // measure mode sets only its type
  const DecodeResult whole = RequestParser(buffer, limits, /*measure=*/true).parse(scratch);
  if (whole.status != DecodeStatus::kComplete) return whole;
  return RequestParser(buffer, limits, /*measure=*/false).parse(out);
}

std::string encode_request(const Request& r) {
  ByteWriter w;
  w.put_u8(static_cast<uint8_t>(r.type));
  auto key_vector = [&] {
    w.put_u64(r.keys.size());
    for (const auto& k : r.keys) w.put_string(k);
  };
  switch (r.type) {
    case QueryType::kValidate:
    case QueryType::kPing: w.put_u32(static_cast<uint32_t>(r.number)); break;
    case QueryType::kSet:
    case QueryType::kAppend:
    case QueryType::kQueuePush:
      w.put_string(r.keys.at(0));
      w.put_string(r.values.at(0));
      break;
    case QueryType::kCompareSet:
      w.put_string(r.keys.at(0));
      w.put_string(r.values.at(0));
      w.put_string(r.values.at(1));
      break;
    case QueryType::kGet:
    case QueryType::kDeleteKey:
    case QueryType::kQueueLen:
    case QueryType::kQueuePop: w.put_string(r.keys.at(0)); break;
    case QueryType::kAdd:
    case QueryType::kBarrier:
      w.put_string(r.keys.at(0));
      w.put_i64(r.number);
      break;
    case QueryType::kCheck:
    case QueryType::kWait:
    case QueryType::kMultiGet: key_vector(); break;
    case QueryType::kMultiSet:
      w.put_u64(r.keys.size());
      for (size_t i = 0; i < r.keys.size(); ++i) {
        w.put_string(r.keys[i]);
        w.put_string(r.values.at(i));
      }
      break;
    case QueryType::kGetNumKeys:
    case QueryType::kCancelWait:
    case QueryType::kListKeys: break;
    case QueryType::kMeshrun: w.put_string(r.values.at(0)); break;
  }
  return w.take();
}

}  // namespace meshrun::proto
