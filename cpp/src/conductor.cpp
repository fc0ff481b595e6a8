// conductor_check(): AgentConductor plans (python/toporoute/conductor_topology.py, the oracle) in the core.
// Per plan: extraction (every rule of extract_yaml, always definitive), the size limit, a parser for a strict
// subset of YAML that PyYAML reads identically (anything else is deferred to the reference), then the schema
// and logic checks with the reference's messages, in its order.
#include <algorithm>
#include <cstring>
#include <new>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "parallel.hpp"
#include "toporoute/conductor.hpp"

namespace toporoute {

namespace {

using Sv = std::string_view;

constexpr std::int64_t kParallelPlans = 64;
// The parser's own nesting bound (the stack), whatever max_depth says: deeper plans are deferred.
constexpr std::int64_t kMaxNesting = 64;
// PyYAML rejects simple keys longer than 1024 characters; shorter bound, deferred beyond it.
constexpr std::size_t kMaxKey = 128;
// int64 holds every 18-digit number.
constexpr std::size_t kMaxDigits = 18;

// ------------------------------------------------------------------------------------------- text helpers

// UTF-8 as Python's encode("utf-8", "surrogatepass") writes it (surrogates allowed, nothing else invalid).
bool valid_utf8(Sv s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  std::size_t i = 0;
  auto cont = [&](std::size_t k) { return k < n && (p[k] & 0xC0) == 0x80; };
  while (i < n) {
    if (i + 8 <= n) {  // ASCII runs eight bytes at a time
      std::uint64_t word;
      std::memcpy(&word, p + i, 8);
      if ((word & 0x8080808080808080ULL) == 0) {
        i += 8;
        continue;
      }
    }
    const unsigned c = p[i];
    if (c < 0x80) {
      ++i;
    } else if (c >= 0xC2 && c <= 0xDF) {
      if (!cont(i + 1)) return false;
      i += 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      if (!cont(i + 1) || !cont(i + 2)) return false;
      if (c == 0xE0 && p[i + 1] < 0xA0) return false;  // overlong
      i += 3;
    } else if (c >= 0xF0 && c <= 0xF4) {
      if (!cont(i + 1) || !cont(i + 2) || !cont(i + 3)) return false;
      if (c == 0xF0 && p[i + 1] < 0x90) return false;  // overlong
      if (c == 0xF4 && p[i + 1] > 0x8F) return false;  // beyond U+10FFFF
      i += 4;
    } else {
      return false;
    }
  }
  return true;
}

// Python's str.strip() == "" (every code point str.isspace()); `s` is valid UTF-8.
bool blank_line(Sv s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  std::size_t i = 0;
  while (i < n) {
    const unsigned c = p[i];
    if (c < 0x80) {
      if (!(c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F))) return false;
      ++i;
    } else if (c == 0xC2) {  // U+0085, U+00A0
      if (i + 1 >= n || (p[i + 1] != 0x85 && p[i + 1] != 0xA0)) return false;
      i += 2;
    } else if (c == 0xE1) {  // U+1680
      if (i + 2 >= n || p[i + 1] != 0x9A || p[i + 2] != 0x80) return false;
      i += 3;
    } else if (c == 0xE2) {  // U+2000..200A, U+2028, U+2029, U+202F, U+205F
      if (i + 2 >= n) return false;
      const unsigned b1 = p[i + 1], b2 = p[i + 2];
      const bool ok = (b1 == 0x80 && (b2 <= 0x8A || b2 == 0xA8 || b2 == 0xA9 || b2 == 0xAF)) ||
                      (b1 == 0x81 && b2 == 0x9F);
      if (!ok) return false;
      i += 3;
    } else if (c == 0xE3) {  // U+3000
      if (i + 2 >= n || p[i + 1] != 0x80 || p[i + 2] != 0x80) return false;
      i += 3;
    } else {
      return false;
    }
  }
  return true;
}

// text.split("\n") with one trailing "\r" dropped per line.
std::vector<Sv> split_lines(Sv text) {
  std::vector<Sv> lines;
  std::size_t start = 0;
  while (true) {
    const std::size_t nl = text.find('\n', start);
    Sv line = text.substr(start, nl == Sv::npos ? Sv::npos : nl - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    lines.push_back(line);
    if (nl == Sv::npos) break;
    start = nl + 1;
  }
  return lines;
}

std::size_t skip_blanks(Sv s, std::size_t i) {
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  return i;
}

char lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

enum class Fence { none, yaml, plain, other };

// _FENCE: ^[ \t]*```(.*)$ with the info string stripped of spaces and tabs: empty (plain), yaml/yml in any ASCII
// case (yaml), anything else (another language's block, skipped).
Fence fence_kind(Sv s) {
  std::size_t i = skip_blanks(s, 0);
  if (s.substr(i, 3) != "```") return Fence::none;
  i = skip_blanks(s, i + 3);
  std::size_t end = s.size();
  while (end > i && (s[end - 1] == ' ' || s[end - 1] == '\t')) --end;
  if (end == i) return Fence::plain;
  std::string word;
  for (std::size_t k = i; k < end && word.size() < 5; ++k) word += lower(s[k]);
  return (end - i <= 4 && (word == "yaml" || word == "yml")) ? Fence::yaml : Fence::other;
}

// _CLOSE: ^[ \t]*```[ \t]*$
bool is_plain_fence(Sv s) {
  const std::size_t i = skip_blanks(s, 0);
  return s.substr(i, 3) == "```" && skip_blanks(s, i + 3) == s.size();
}

// _STEP_LINE: ^-[ \t]*step[ \t]*:
bool is_step_line(Sv s) {
  if (s.empty() || s[0] != '-') return false;
  std::size_t i = skip_blanks(s, 1);
  if (s.substr(i, 4) != "step") return false;
  i = skip_blanks(s, i + 4);
  return i < s.size() && s[i] == ':';
}

// textwrap.dedent("\n".join(lines)): lines of only spaces and tabs become empty; the longest common prefix of
// the other lines' leading [ \t]* is removed from them.
std::string dedent(const Sv* lines, std::size_t n) {
  Sv margin;
  bool have = false;
  std::size_t total = n;
  for (std::size_t i = 0; i < n; ++i) {
    const Sv ln = lines[i];
    total += ln.size();
    const std::size_t k = skip_blanks(ln, 0);
    if (k == ln.size()) continue;
    const Sv indent = ln.substr(0, k);
    if (!have) {
      margin = indent;
      have = true;
    } else {
      std::size_t j = 0;
      while (j < margin.size() && j < indent.size() && margin[j] == indent[j]) ++j;
      margin = margin.substr(0, j);
    }
  }
  std::string out;
  out.reserve(total);
  for (std::size_t i = 0; i < n; ++i) {
    if (i > 0) out += '\n';
    const Sv ln = lines[i];
    if (skip_blanks(ln, 0) == ln.size()) continue;
    out.append(ln.substr(margin.size()));
  }
  return out;
}

// extract_yaml(text, lenient): false when there is no block.
bool extract_yaml(Sv text, bool lenient, std::string* block) {
  const std::vector<Sv> lines = split_lines(text);
  const std::size_t n = lines.size();
  std::vector<std::pair<std::size_t, std::size_t>> plain;  // [begin, end) line ranges
  bool have_yaml = false;
  std::pair<std::size_t, std::size_t> last_yaml{0, 0};
  std::size_t i = 0;
  while (i < n) {
    const Fence kind = fence_kind(lines[i]);
    if (kind != Fence::none) {
      std::size_t j = i + 1;
      while (j < n && !is_plain_fence(lines[j])) ++j;
      if (kind == Fence::yaml) {
        have_yaml = true;
        last_yaml = {i + 1, j};
      } else if (kind == Fence::plain) {
        plain.emplace_back(i + 1, j);
      }
      i = j + 1;
      continue;
    }
    ++i;
  }
  if (have_yaml) {
    *block = dedent(lines.data() + last_yaml.first, last_yaml.second - last_yaml.first);
    return true;
  }
  if (!lenient) return false;
  for (auto it = plain.rbegin(); it != plain.rend(); ++it) {
    std::string body = dedent(lines.data() + it->first, it->second - it->first);
    const Sv b(body);
    Sv first;
    std::size_t start = 0;
    while (true) {
      const std::size_t nl = b.find('\n', start);
      const Sv ln = b.substr(start, nl == Sv::npos ? Sv::npos : nl - start);
      if (!blank_line(ln)) {
        first = ln;
        break;
      }
      if (nl == Sv::npos) break;
      start = nl + 1;
    }
    if (is_step_line(first)) {
      *block = std::move(body);
      return true;
    }
  }
  for (std::size_t k = 0; k < n; ++k) {
    if (!is_step_line(lines[k])) continue;
    std::size_t j = k + 1;
    while (j < n && (blank_line(lines[j]) || Sv(" \t#-").find(lines[j][0]) != Sv::npos)) ++j;
    *block = dedent(lines.data() + k, j - k);
    return true;
  }
  return false;
}

// ----------------------------------------------------------------------------------------- YAML subset

enum class Kind : std::uint8_t { null, integer, string, list, mapping };

// A composed YAML node as PyYAML's SafeLoader would construct it, in one flat array per plan (strings view the
// block). Children (list items, or mapping values with their keys) are linked in document order.
struct Node {
  Kind kind = Kind::null;
  std::int64_t integer = 0;
  Sv text;  // a string's value
  Sv key;   // the key of a mapping's value
  std::int32_t first = -1, last = -1, next = -1, size = 0;
};

struct Line {
  std::int64_t indent;
  Sv text;  // from the first non-space character
};

// PyYAML 1.1's bool and null words (Resolver: yes/no/true/false/on/off in three casings; null, Null, NULL).
bool is_bool_word(Sv v) {
  if (v.size() < 2 || v.size() > 5 || Sv("yYnNtTfFoO").find(v[0]) == Sv::npos) return false;
  constexpr Sv words[] = {"yes", "Yes", "YES", "no",    "No",    "NO",    "true", "True", "TRUE",
                          "false", "False", "FALSE", "on", "On", "ON", "off", "Off", "OFF"};
  for (const Sv w : words) {
    if (v == w) return true;
  }
  return false;
}

bool is_null_word(Sv v) {
  constexpr Sv null_lower = "null", null_title = "Null", null_upper = "NULL";
  return v.size() == 4 && (v == null_lower || v == null_title || v == null_upper);
}

bool is_alpha(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

// `- ` or a lone `-`: a block sequence entry.
bool is_entry(Sv t) { return !t.empty() && t[0] == '-' && (t.size() == 1 || t[1] == ' '); }

// Length of an identifier key followed by ':' and a space or the end of the line, else 0.
std::size_t key_length(Sv t) {
  if (t.empty() || !(is_alpha(t[0]) || t[0] == '_')) return 0;
  std::size_t i = 1;
  while (i < t.size() && (is_alpha(t[i]) || is_digit(t[i]) || t[i] == '_')) ++i;
  if (i > kMaxKey || i >= t.size() || t[i] != ':') return 0;
  return (i + 1 == t.size() || t[i + 1] == ' ') ? i : 0;
}

// A plain scalar as PyYAML 1.1 resolves it; false for anything that is not null, an int or a plain string of
// [A-Za-z0-9<>_ -] (or that may resolve to a bool, float, timestamp, merge or value).
bool resolve_plain(Sv v, Node* out) {
  if (v == "~") {
    out->kind = Kind::null;
    return true;
  }
  for (const char c : v) {
    if (!(is_alpha(c) || is_digit(c) || c == '<' || c == '>' || c == '_' || c == ' ' || c == '-')) return false;
  }
  const char c0 = v[0];
  if (is_digit(c0) || c0 == '-') {
    const std::size_t s = c0 == '-' ? 1 : 0;
    const std::size_t digits = v.size() - s;
    if (digits == 0 || digits > kMaxDigits) return false;
    for (std::size_t i = s; i < v.size(); ++i) {
      if (!is_digit(v[i])) return false;
    }
    if (v[s] == '0' && digits > 1) return false;  // octal and friends
    std::int64_t x = 0;
    for (std::size_t i = s; i < v.size(); ++i) x = x * 10 + (v[i] - '0');
    out->kind = Kind::integer;
    out->integer = s ? -x : x;
    return true;
  }
  if (c0 == '>' || v == "<<" || is_bool_word(v)) return false;
  if (is_null_word(v)) {
    out->kind = Kind::null;
    return true;
  }
  out->kind = Kind::string;
  out->text = v;
  return true;
}

// A one-line quoted scalar at s[i] without escapes; *end is just past the closing quote.
bool quoted(Sv s, std::size_t i, std::size_t* end, Sv* text) {
  const char q = s[i];
  std::size_t j = i + 1;
  while (j < s.size() && s[j] != q) {
    if (q == '"' && s[j] == '\\') return false;
    ++j;
  }
  if (j == s.size()) return false;                                      // continues on another line
  if (q == '\'' && j + 1 < s.size() && s[j + 1] == '\'') return false;  // '' escape
  *text = s.substr(i + 1, j - i - 1);
  *end = j + 1;
  return true;
}

// What may follow a value on its line: spaces, then nothing or a comment after at least one space.
bool trailer_ok(Sv s, std::size_t i) {
  const std::size_t j = skip_blanks(s, i);
  if (j == s.size()) return true;
  return s[j] == '#' && j > i && s[j - 1] == ' ';
}

Sv rtrim(Sv s) {
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

std::size_t skip_spaces(Sv s, std::size_t i) {
  while (i < s.size() && s[i] == ' ') ++i;
  return i;
}

// Recursive descent over the content lines (blank and comment lines removed) into `nodes` (the root is node
// 0). Every method returns false to defer: the input is outside the subset, or PyYAML might read it
// differently or fail on it. Methods take node indices: appending may move the nodes.
class Parser {
 public:
  Parser(std::vector<Line> lines, std::int64_t max_depth, std::vector<Node>* nodes)
      : lines_(std::move(lines)), max_depth_(std::min(max_depth, kMaxNesting)), nodes_(*nodes) {}

  bool document() {
    nodes_.reserve(2 * lines_.size() + 1);
    nodes_.assign(1, Node{});
    if (lines_.empty()) return true;  // null
    const Line& first = lines_[0];
    bool ok;
    if (is_entry(first.text)) {
      ok = sequence(0, first.indent, 1, false);
    } else if (key_length(first.text) != 0) {
      ok = mapping(0, first.indent, 1, first.text);
    } else {
      ok = inline_value(0, first.text, 1);
      pos_ = 1;
    }
    return ok && pos_ == lines_.size();
  }

 private:
  bool fits(std::int64_t depth) const { return depth <= max_depth_; }

  std::int32_t child(std::int32_t parent, Sv key) {
    const auto id = static_cast<std::int32_t>(nodes_.size());
    nodes_.emplace_back();
    nodes_.back().key = key;
    Node& p = nodes_[static_cast<std::size_t>(parent)];
    if (p.last < 0) {
      p.first = id;
    } else {
      nodes_[static_cast<std::size_t>(p.last)].next = id;
    }
    p.last = id;
    ++p.size;
    return id;
  }

  bool has_key(std::int32_t self, Sv key) {
    const Node& m = nodes_[static_cast<std::size_t>(self)];
    if (m.size < 8) {
      for (std::int32_t c = m.first; c >= 0; c = nodes_[static_cast<std::size_t>(c)].next) {
        if (nodes_[static_cast<std::size_t>(c)].key == key) return true;
      }
      return false;
    }
    if (keys_.empty() || keys_owner_ != self) {  // a large mapping: hash its keys once
      keys_.clear();
      keys_owner_ = self;
      for (std::int32_t c = m.first; c >= 0; c = nodes_[static_cast<std::size_t>(c)].next) {
        keys_.insert(nodes_[static_cast<std::size_t>(c)].key);
      }
    }
    return keys_.count(key) != 0;
  }

  // A block collection starting at lines_[pos_] (deeper than its parent).
  bool nested(std::int32_t self, std::int64_t depth) {
    const Line& l = lines_[pos_];
    if (is_entry(l.text)) return sequence(self, l.indent, depth, false);
    if (key_length(l.text) != 0) return mapping(self, l.indent, depth, l.text);
    return false;
  }

  // Entries `- ...` at column col; an indentless sequence (a mapping value at the mapping's column) ends at
  // the first line of that column that is not an entry.
  bool sequence(std::int32_t self, std::int64_t col, std::int64_t depth, bool indentless) {
    if (!fits(depth)) return false;
    nodes_[static_cast<std::size_t>(self)].kind = Kind::list;
    while (pos_ < lines_.size()) {
      const Line& l = lines_[pos_];
      if (l.indent < col) break;
      if (l.indent > col) return false;
      if (!is_entry(l.text)) {
        if (indentless) break;
        return false;
      }
      const std::size_t k = skip_spaces(l.text, 1);
      const Sv rest = l.text.substr(k);
      const std::int32_t item = child(self, {});
      if (rest.empty() || rest[0] == '#') {
        ++pos_;
        if (pos_ < lines_.size() && lines_[pos_].indent > col) {
          if (!nested(item, depth + 1)) return false;
        } else if (!fits(depth + 1)) {
          return false;
        }
      } else if (is_entry(rest)) {
        return false;
      } else if (key_length(rest) != 0) {
        if (!mapping(item, col + static_cast<std::int64_t>(k), depth + 1, rest)) return false;
      } else {
        if (!inline_value(item, rest, depth + 1)) return false;
        ++pos_;
      }
    }
    return true;
  }

  // Entries `key: value` at column col; the first one is `first` (it may follow a `- ` on its line).
  bool mapping(std::int32_t self, std::int64_t col, std::int64_t depth, Sv first) {
    if (!fits(depth)) return false;
    nodes_[static_cast<std::size_t>(self)].kind = Kind::mapping;
    Sv text = first;
    while (true) {
      const std::size_t kl = key_length(text);
      if (kl == 0) return false;
      const Sv key = text.substr(0, kl);
      if (is_bool_word(key) || is_null_word(key) || has_key(self, key)) return false;
      const Sv rest = text.substr(skip_spaces(text, kl + 1));
      const std::int32_t v = child(self, key);
      if (keys_owner_ == self && !keys_.empty()) keys_.insert(key);
      if (rest.empty() || rest[0] == '#') {
        ++pos_;
        if (pos_ < lines_.size() && lines_[pos_].indent > col) {
          if (!nested(v, depth + 1)) return false;
        } else if (pos_ < lines_.size() && lines_[pos_].indent == col && is_entry(lines_[pos_].text)) {
          if (!sequence(v, col, depth + 1, true)) return false;
        } else if (!fits(depth + 1)) {
          return false;
        }
      } else {
        if (!inline_value(v, rest, depth + 1)) return false;
        ++pos_;
      }
      if (pos_ >= lines_.size()) break;
      const Line& l = lines_[pos_];
      if (l.indent < col) break;
      if (l.indent > col) return false;
      text = l.text;
    }
    return true;
  }

  // A value on the rest of a line: a flow sequence of scalars, a quoted scalar or a plain scalar.
  bool inline_value(std::int32_t self, Sv s, std::int64_t depth) {
    if (!fits(depth)) return false;
    if (s[0] == '[') return flow_sequence(self, s, depth);
    Node& n = nodes_[static_cast<std::size_t>(self)];
    if (s[0] == '\'' || s[0] == '"') {
      std::size_t end = 0;
      if (!quoted(s, 0, &end, &n.text)) return false;
      n.kind = Kind::string;
      return trailer_ok(s, end);
    }
    std::size_t end = s.size();
    for (std::size_t j = 1; j < s.size(); ++j) {
      if (s[j] == '#' && s[j - 1] == ' ') {
        end = j;
        break;
      }
    }
    return resolve_plain(rtrim(s.substr(0, end)), &n);
  }

  bool flow_sequence(std::int32_t self, Sv s, std::int64_t depth) {
    nodes_[static_cast<std::size_t>(self)].kind = Kind::list;
    std::size_t i = skip_spaces(s, 1);
    if (i < s.size() && s[i] == ']') return trailer_ok(s, i + 1);
    if (!fits(depth + 1)) return false;
    while (i < s.size()) {
      const std::int32_t item = child(self, {});
      Node& n = nodes_[static_cast<std::size_t>(item)];
      if (s[i] == '\'' || s[i] == '"') {
        std::size_t end = 0;
        if (!quoted(s, i, &end, &n.text)) return false;
        n.kind = Kind::string;
        i = skip_spaces(s, end);
      } else {
        std::size_t j = i;
        while (j < s.size() && s[j] != ',' && s[j] != ']') ++j;
        const Sv v = rtrim(s.substr(i, j - i));
        if (v.empty() || !resolve_plain(v, &n)) return false;
        i = j;
      }
      if (i >= s.size()) return false;
      if (s[i] == ']') return trailer_ok(s, i + 1);
      if (s[i] != ',') return false;
      i = skip_spaces(s, i + 1);
      if (i < s.size() && s[i] == ']') return false;  // trailing comma
    }
    return false;
  }

  std::vector<Line> lines_;
  std::size_t pos_ = 0;
  std::int64_t max_depth_;
  std::vector<Node>& nodes_;
  std::unordered_set<Sv> keys_;  // the keys of the large mapping keys_owner_
  std::int32_t keys_owner_ = -1;
};

// The block as nodes (the root first), or false to defer.
bool parse_yaml(Sv block, std::int64_t max_depth, std::vector<Node>* nodes) {
  if (block.size() > (std::size_t{1} << 30)) return false;  // node indices are int32
  for (const char c : block) {
    if (c != '\n' && (c < 0x20 || c > 0x7E)) return false;
  }
  std::vector<Line> lines;
  std::size_t start = 0;
  while (start <= block.size()) {
    std::size_t nl = block.find('\n', start);
    if (nl == Sv::npos) nl = block.size();
    const Sv ln = block.substr(start, nl - start);
    const std::size_t k = skip_spaces(ln, 0);
    if (k < ln.size() && ln[k] != '#') lines.push_back({static_cast<std::int64_t>(k), ln.substr(k)});
    start = nl + 1;
  }
  return Parser(std::move(lines), max_depth, nodes).document();
}

// ------------------------------------------------------------------------------------------ schema, logic

// The outcome of one plan.
struct Item {
  std::uint8_t error = kConductorDeferred;
  std::string message;
  bool has_yaml = false;
  std::string yaml;
  std::int64_t edges = 0, depth = 0, n_steps = 0;
  std::vector<Sv> ids;  // view the parsed block (yaml)
  std::vector<std::int16_t> role;
  std::vector<std::int64_t> step, self_src, ref_count, ref_src;
  std::vector<std::int32_t> layer;
  std::vector<std::string> warnings;
};

struct Fail {
  std::uint8_t code;
  std::string message;
};

struct Agent {
  Sv id;
  std::int16_t role;
  std::vector<Sv> refs;
};

struct Step {
  std::int64_t step;
  std::vector<Agent> agents;
};

// Per-context tables, built once per context.
struct ContextTables {
  std::int64_t off = 0, base = 0;
  std::int32_t turn = 0;
  bool seen_coder = false;
  std::unordered_map<Sv, std::int64_t> latest;    // id -> its last node
  std::unordered_map<Sv, std::int64_t> previous;  // id -> its last node of the previous turn
};

struct Pool {
  const std::string* names;
  std::int64_t size;
  std::int16_t coder = -1, debugger = -1, tester = -1;
  std::string listing;  // ", ".join(pool)
};

const char* kind_name(const Node& v) {
  switch (v.kind) {
    case Kind::null:
      return "null";
    case Kind::integer:
      return "an int";
    case Kind::string:
      return "a string";
    case Kind::list:
      return "a list";
    case Kind::mapping:
      break;
  }
  return "a mapping";
}

// _q: at most 40 characters then "...", quoted (the block is ASCII, so characters are bytes).
std::string quote(Sv v) {
  std::string s = "'";
  if (v.size() > 40) {
    s.append(v.substr(0, 40));
    s += "...";
  } else {
    s.append(v);
  }
  return s + "'";
}

std::string str(std::int64_t x) { return std::to_string(x); }

// _token: ^<([A-Za-z][A-Za-z0-9 -]*?)(?:_([0-9]+))?>$ and the role in the pool.
bool token(Sv value, const Pool& pool, const std::string& where, const std::string& what, Sv* id,
           std::int16_t* role, Fail* fail) {
  bool ok = value.size() >= 3 && value.front() == '<' && value.back() == '>';
  Sv name;
  if (ok) {
    const Sv inner = value.substr(1, value.size() - 2);
    const std::size_t us = inner.find('_');
    name = inner.substr(0, us);
    ok = !name.empty() && is_alpha(name[0]);
    for (const char c : name) ok = ok && (is_alpha(c) || is_digit(c) || c == ' ' || c == '-');
    if (us != Sv::npos) {
      const Sv num = inner.substr(us + 1);
      ok = ok && !num.empty();
      for (const char c : num) ok = ok && is_digit(c);
    }
    *id = inner;
  }
  if (!ok) {
    *fail = {kConductorSchema,
             where + ": " + what + " " + quote(value) + " is not an agent token like '<coder>' or '<coder_2>'"};
    return false;
  }
  for (std::int64_t r = 0; r < pool.size; ++r) {
    if (pool.names[r] == name) {
      *role = static_cast<std::int16_t>(r);
      return true;
    }
  }
  *fail = {kConductorSchema,
           where + ": " + what + " " + quote(value) + " names an unknown role (the pool: " + pool.listing + ")"};
  return false;
}

// _schema over the parsed nodes (node 0 is the document).
bool schema(const std::vector<Node>& nodes, const Pool& pool, const ConductorOptions& opt, std::vector<Step>* steps,
            Fail* fail) {
  auto bad = [fail](std::string m) {
    *fail = {kConductorSchema, std::move(m)};
    return false;
  };
  auto at = [&nodes](std::int32_t i) -> const Node& { return nodes[static_cast<std::size_t>(i)]; };
  auto lookup = [&](const Node& m, Sv key) -> const Node* {
    for (std::int32_t c = m.first; c >= 0; c = at(c).next) {
      if (at(c).key == key) return &at(c);
    }
    return nullptr;
  };
  // Fails unless mapping m holds only the keys k0 and k1 (the first other key is reported).
  auto only_keys = [&](const Node& m, const std::string& where, const char* k0, const char* k1) {
    for (std::int32_t c = m.first; c >= 0; c = at(c).next) {
      if (at(c).key != k0 && at(c).key != k1) {
        return bad(where + " has an unknown key " + quote(at(c).key) + " (allowed: " + k0 + ", " + k1 + ")");
      }
    }
    return true;
  };
  const Node& doc = nodes[0];
  if (doc.kind != Kind::list || doc.size == 0) {
    return bad(std::string("the plan must be a non-empty list of steps; got ") +
               (doc.kind == Kind::list ? "an empty list" : kind_name(doc)));
  }
  std::int64_t count = 0, i = 0;
  for (std::int32_t ci = doc.first; ci >= 0; ci = at(ci).next) {
    const Node& item = at(ci);
    std::string where = "list item " + str(++i);
    if (item.kind != Kind::mapping) {
      return bad(where + " must be a mapping with 'step' and 'agents'; got " + kind_name(item));
    }
    if (!only_keys(item, where, "step", "agents")) return false;
    const Node* step = lookup(item, "step");
    if (step == nullptr) return bad(where + " has no 'step'");
    if (step->kind != Kind::integer) return bad(where + ": step must be an integer; got " + kind_name(*step));
    where = "step " + str(step->integer);
    const Node* agents = lookup(item, "agents");
    if (agents == nullptr) return bad(where + " has no 'agents'");
    if (agents->kind != Kind::list || agents->size == 0) {
      return bad(where + ": agents must be a non-empty list; got " +
                 (agents->kind == Kind::list ? "an empty list" : kind_name(*agents)));
    }
    Step st{step->integer, {}};
    st.agents.reserve(static_cast<std::size_t>(agents->size));
    std::int64_t j = 0;
    for (std::int32_t cj = agents->first; cj >= 0; cj = at(cj).next) {
      if (++count > opt.max_agents) return bad("the plan has more than " + str(opt.max_agents) + " agents");
      const Node& a = at(cj);
      const std::string w = where + ", agent " + str(++j);
      if (a.kind != Kind::mapping) return bad(w + " must be a mapping with 'agent' and 'ref'; got " + kind_name(a));
      if (!only_keys(a, w, "agent", "ref")) return false;
      const Node* tok = lookup(a, "agent");
      if (tok == nullptr) return bad(w + " has no 'agent'");
      if (tok->kind != Kind::string) return bad(w + ": agent must be a token like '<coder>'; got " + kind_name(*tok));
      Agent agent;
      if (!token(tok->text, pool, w, "agent", &agent.id, &agent.role, fail)) return false;
      const Node* refs = lookup(a, "ref");
      if (refs != nullptr && refs->kind != Kind::null) {
        if (refs->kind != Kind::list) return bad(w + ": ref must be a list of agent tokens; got " + kind_name(*refs));
        if (refs->size > opt.max_refs) {
          return bad(w + ": " + str(refs->size) + " refs; the limit is " + str(opt.max_refs));
        }
        agent.refs.reserve(static_cast<std::size_t>(refs->size));
        std::int64_t k = 0;
        for (std::int32_t ck = refs->first; ck >= 0; ck = at(ck).next) {
          const Node& r = at(ck);
          const std::string what = "ref " + str(++k);
          if (r.kind != Kind::string) {
            return bad(w + ": " + what + " must be a token like '<planner>'; got " + kind_name(r));
          }
          Sv rid;
          std::int16_t rrole = 0;
          if (!token(r.text, pool, w, what, &rid, &rrole, fail)) return false;
          agent.refs.push_back(rid);
        }
      }
      st.agents.push_back(std::move(agent));
    }
    steps->push_back(std::move(st));
  }
  return true;
}

// Id -> index: a linear scan while small (plans have a handful of agents), hashed beyond.
class IdMap {
 public:
  std::int64_t find(Sv id) const {
    if (hashed_) {
      const auto h = big_.find(id);
      return h == big_.end() ? -1 : h->second;
    }
    for (const auto& [k, v] : small_) {
      if (k == id) return v;
    }
    return -1;
  }
  void set(Sv id, std::int64_t value) {
    if (hashed_) {
      big_[id] = value;
      return;
    }
    for (auto& kv : small_) {
      if (kv.first == id) {
        kv.second = value;
        return;
      }
    }
    small_.emplace_back(id, value);
    if (small_.size() > 16) {
      big_.insert(small_.begin(), small_.end());
      hashed_ = true;
    }
  }
  void clear() {
    small_.clear();
    big_.clear();
    hashed_ = false;
  }

 private:
  std::vector<std::pair<Sv, std::int64_t>> small_;
  std::unordered_map<Sv, std::int64_t> big_;
  bool hashed_ = false;
};

// _decode: logic checks and the graph, written into `it`.
bool decode(const std::vector<Step>& steps, const ContextTables& ctx, const ConductorArgs& a, const Pool& pool,
            Item* it, Fail* fail) {
  auto bad = [fail](std::string m) {
    *fail = {kConductorLogic, std::move(m)};
    return false;
  };
  const std::int64_t base = ctx.base;
  std::size_t n_agents = 0;
  for (const Step& st : steps) n_agents += st.agents.size();
  it->ids.reserve(n_agents);
  it->role.reserve(n_agents);
  it->step.reserve(n_agents);
  it->layer.reserve(n_agents);
  it->self_src.reserve(n_agents);
  it->ref_count.reserve(n_agents);
  IdMap latest;  // this turn's ids (before the context's); an id's first node of the turn is its absence here
  IdMap here;    // the current step's ids
  std::vector<std::int64_t> depth_of;
  depth_of.reserve(n_agents);
  std::vector<std::pair<std::size_t, std::size_t>> layers;  // [begin, end) local node ranges
  bool seen_coder = ctx.seen_coder;
  auto role_of = [&](std::int64_t g) -> std::int16_t {
    return g < base ? a.ctx_role[ctx.off + g] : it->role[static_cast<std::size_t>(g - base)];
  };
  auto resolve = [&](Sv id) -> std::int64_t {
    const std::int64_t l = latest.find(id);
    if (l >= 0) return l;
    const auto c = ctx.latest.find(id);
    return c != ctx.latest.end() ? c->second : -1;
  };
  std::vector<std::int64_t> resolved;
  std::unordered_set<std::int64_t> resolved_set;
  for (std::size_t si = 0; si < steps.size(); ++si) {
    const Step& st = steps[si];
    auto at = [&st](const Agent& ag) { return "step " + str(st.step) + ": <" + std::string(ag.id) + ">"; };
    if (si > 0 && st.step <= steps[si - 1].step) {
      return bad("step " + str(st.step) + " follows step " + str(steps[si - 1].step) + "; step numbers must increase");
    }
    const std::size_t begin = it->ids.size();
    here.clear();
    for (const Agent& ag : st.agents) {
      if (here.find(ag.id) >= 0) {
        return bad(at(ag) + " appears twice in one step (repeated roles need ids like <coder_2>)");
      }
      here.set(ag.id, 0);
      if (ag.role == pool.debugger && !seen_coder) return bad(at(ag) + " needs a <coder> in an earlier step (L5)");
      if (si == 0 && ctx.turn == 0 && !ag.refs.empty()) {
        return bad(at(ag) + " refs <" + std::string(ag.refs[0]) + ">, but first-step agents take no refs (L1)");
      }
      resolved.clear();
      resolved_set.clear();
      for (const Sv r : ag.refs) {
        const std::int64_t src = resolve(r);
        if (src < 0) return bad(at(ag) + " refs <" + std::string(r) + ">, which is no agent of an earlier step (L2)");
        const bool dup = ag.refs.size() <= 32 ? std::find(resolved.begin(), resolved.end(), src) != resolved.end()
                                              : !resolved_set.insert(src).second;
        if (dup) return bad(at(ag) + " refs <" + std::string(r) + "> twice");
        resolved.push_back(src);
      }
      std::int64_t self = -1;
      if (latest.find(ag.id) < 0) {
        const auto p = ctx.previous.find(ag.id);
        if (p != ctx.previous.end()) self = p->second;
      }
      std::int64_t d = 0;
      for (const std::int64_t src : resolved) {
        if (src >= base) d = std::max(d, depth_of[static_cast<std::size_t>(src - base)]);
      }
      it->ids.push_back(ag.id);
      it->role.push_back(ag.role);
      it->step.push_back(st.step);
      it->layer.push_back(static_cast<std::int32_t>(si));
      it->self_src.push_back(self);
      it->ref_count.push_back(static_cast<std::int64_t>(resolved.size()));
      it->ref_src.insert(it->ref_src.end(), resolved.begin(), resolved.end());
      depth_of.push_back(d + 1);
    }
    const std::size_t end = it->ids.size();
    for (std::size_t x = begin; x < end; ++x) {
      latest.set(it->ids[x], base + static_cast<std::int64_t>(x));
      seen_coder = seen_coder || it->role[x] == pool.coder;
    }
    layers.emplace_back(begin, end);
  }
  const std::string last = str(steps.back().step);
  std::vector<std::size_t> testers;
  for (std::size_t x = layers.back().first; x < layers.back().second; ++x) {
    if (it->role[x] == pool.tester) testers.push_back(x);
  }
  if (testers.empty()) return bad("the last step (step " + last + ") has no <tester> (L3)");
  std::vector<std::int64_t> ref_begin(it->ids.size() + 1, 0);
  for (std::size_t x = 0; x < it->ids.size(); ++x) ref_begin[x + 1] = ref_begin[x] + it->ref_count[x];
  for (const std::size_t x : testers) {
    bool ok = false;
    for (std::int64_t r = ref_begin[x]; r < ref_begin[x + 1] && !ok; ++r) {
      const std::int16_t role = role_of(it->ref_src[static_cast<std::size_t>(r)]);
      ok = role == pool.coder || role == pool.debugger;
    }
    if (!ok) return bad("step " + last + ": <" + std::string(it->ids[x]) + "> must ref a <coder> or <debugger> (L4)");
  }
  const std::size_t before_last = layers.back().first;
  if (a.options.strict_tester) {
    for (std::size_t x = 0; x < before_last; ++x) {
      if (it->role[x] == pool.tester) {
        return bad("step " + str(it->step[x]) + ": <" + std::string(it->ids[x]) +
                   "> outside the last step (strict mode)");
      }
    }
  }
  std::vector<std::uint8_t> fed(it->ids.size(), 0);
  for (const std::int64_t src : it->ref_src) {
    if (src >= base) fed[static_cast<std::size_t>(src - base)] = 1;
  }
  for (std::size_t x = 0; x < before_last; ++x) {
    if (fed[x]) continue;
    std::string msg = "step " + str(it->step[x]) + ": <" + std::string(it->ids[x]) + "> feeds no later agent";
    if (a.options.concise) return bad(std::move(msg));
    it->warnings.push_back(std::move(msg));
  }
  it->edges = static_cast<std::int64_t>(it->ref_src.size());
  it->n_steps = static_cast<std::int64_t>(steps.size());
  it->depth = *std::max_element(depth_of.begin(), depth_of.end());
  return true;
}

// Context k's id tables: the last node of each id, and of each id in the previous turn (self-edge sources).
void build_tables(const ConductorArgs& a, const Pool& pool, std::int64_t k, ContextTables* c) {
  c->off = a.ctx_off[k];
  c->base = a.ctx_off[k + 1] - a.ctx_off[k];
  c->turn = a.ctx_turn[k];
  for (std::int64_t g = 0; g < c->base; ++g) {
    const Sv id(a.ctx_id[c->off + g]);
    c->latest[id] = g;
    if (a.ctx_node_turn[c->off + g] == c->turn - 1) c->previous[id] = g;
    c->seen_coder = c->seen_coder || a.ctx_role[c->off + g] == pool.coder;
  }
}

// check() for one plan.
void check_one(const std::string& text, const ContextTables& ctx, const ConductorArgs& a, const Pool& pool, Item* it) {
  const ConductorOptions& opt = a.options;
  if (!valid_utf8(text)) return;  // not from Python's encoder: deferred
  if (!extract_yaml(text, opt.lenient, &it->yaml)) {
    it->error = kConductorNoYaml;
    it->message = "no ```yaml block in the output";
    return;
  }
  it->has_yaml = true;
  const auto size = static_cast<std::int64_t>(it->yaml.size());
  if (size > opt.max_bytes) {
    it->error = kConductorParse;
    it->message = "the YAML block is " + str(size) + " bytes; the limit is " + str(opt.max_bytes);
    return;
  }
  std::vector<Node> doc;
  if (!parse_yaml(it->yaml, opt.max_depth, &doc)) return;
  std::vector<Step> steps;
  Fail fail{kConductorOk, {}};
  if (!schema(doc, pool, opt, &steps, &fail) || !decode(steps, ctx, a, pool, it, &fail)) {
    it->error = fail.code;
    it->message = std::move(fail.message);
    it->ids.clear();
    it->role.clear();
    it->step.clear();
    it->self_src.clear();
    it->ref_count.clear();
    it->ref_src.clear();
    it->layer.clear();
    it->warnings.clear();
    it->edges = it->depth = it->n_steps = 0;
    return;
  }
  it->error = kConductorOk;
}

}  // namespace

Status check_conductor_args(const ConductorArgs& a) {
  auto invalid = [](const char* arg, std::string m) {
    return Status::error(StatusCode::invalid_argument, arg, std::move(m));
  };
  auto range = [](const char* arg, std::string m) {
    return Status::error(StatusCode::out_of_range, arg, std::move(m));
  };
  auto at = [](std::int64_t i) { return " at index " + str(i); };
  if (a.B < 0 || a.C < 0 || a.M < 0 || a.P < 0) return invalid("texts", "conductor_check sizes must be non-negative");
  if (a.B > 0 && (a.texts == nullptr || a.ctx_index == nullptr)) {
    return invalid("texts", "texts and ctx_index must be given");
  }
  if (a.ctx_off == nullptr) return invalid("ctx_off", "ctx_off must be given");
  const ConductorOptions& o = a.options;
  const std::pair<const char*, std::int64_t> limits[] = {
      {"max_bytes", o.max_bytes}, {"max_depth", o.max_depth}, {"max_agents", o.max_agents}, {"max_refs", o.max_refs}};
  for (const auto& [name, v] : limits) {
    if (v < 1) return range(name, std::string(name) + " must be >= 1; got " + str(v));
  }
  if (a.P > 32767) return invalid("pool", "pool may hold at most 32767 roles; got " + str(a.P));
  for (std::int64_t b = 0; b < a.B; ++b) {
    if (a.ctx_index[b] < 0 || a.ctx_index[b] >= a.C) {
      return range("ctx_index", "ctx_index must lie in [0, " + str(a.C) + "); got " + str(a.ctx_index[b]) + at(b));
    }
  }
  if (a.ctx_off[0] != 0 || a.ctx_off[a.C] != a.M) {
    return invalid("ctx_off", "ctx_off must start at 0 and end at " + str(a.M) + "; got " + str(a.ctx_off[0]) +
                                  " and " + str(a.ctx_off[a.C]));
  }
  for (std::int64_t k = 0; k < a.C; ++k) {
    if (a.ctx_off[k + 1] < a.ctx_off[k]) {
      return invalid("ctx_off", "ctx_off must be non-decreasing; it falls" + at(k + 1));
    }
    if (a.ctx_turn[k] < 0) return range("ctx_turn", "ctx_turn must be >= 0; got " + str(a.ctx_turn[k]) + at(k));
  }
  for (std::int64_t k = 0; k < a.C; ++k) {  // offsets are in [0, M] now
    for (std::int64_t g = a.ctx_off[k]; g < a.ctx_off[k + 1]; ++g) {
      if (a.ctx_node_turn[g] >= a.ctx_turn[k]) {
        return range("ctx_node_turn", "context nodes must be of turns before their context's turn " +
                                          str(a.ctx_turn[k]) + "; got " + str(a.ctx_node_turn[g]) + at(g));
      }
    }
  }
  for (std::int64_t g = 0; g < a.M; ++g) {
    if (a.ctx_role[g] < 0 || a.ctx_role[g] >= a.P) {
      return range("ctx_role", "ctx_role must lie in [0, " + str(a.P) + "); got " + str(a.ctx_role[g]) + at(g));
    }
  }
  return Status::success();
}

namespace {

// Exceptions of the items of a parallel loop, caught inside the item (none may escape an OpenMP region): the
// lowest failing item of each kind.
class LoopFailure {
 public:
  explicit LoopFailure(std::int64_t n) : no_memory_(n), other_(n) {}

  template <class F>
  void guard(std::int64_t i, F&& f) noexcept {
    try {
      f();
    } catch (const std::bad_alloc&) {
      no_memory_.record(i);
    } catch (...) {
      other_.record(i);
    }
  }

  /// out_of_memory (or, for any other exception, runtime) naming the first failed item.
  Status status(const char* arg, const char* item) const {
    if (no_memory_.any()) {
      return Status::error(StatusCode::out_of_memory, "",
                           "conductor_check: could not allocate memory while checking " + std::string(item) + " " +
                               str(no_memory_.get()));
    }
    if (other_.any()) {
      return Status::error(StatusCode::runtime, arg,
                           "conductor_check failed unexpectedly on " + std::string(item) + " " + str(other_.get()));
    }
    return Status::success();
  }

 private:
  detail::FirstError no_memory_, other_;
};

}  // namespace

Status conductor_check(const ConductorArgs& a, ConductorBatch* out) {
  TOPOROUTE_RETURN_IF_ERROR(check_conductor_args(a));
  try {
    Pool pool{a.pool, a.P, -1, -1, -1, {}};
    for (std::int64_t r = 0; r < a.P; ++r) {
      if (r > 0) pool.listing += ", ";
      pool.listing += a.pool[r];
      if (a.pool[r] == "coder") pool.coder = static_cast<std::int16_t>(r);
      if (a.pool[r] == "debugger") pool.debugger = static_cast<std::int16_t>(r);
      if (a.pool[r] == "tester") pool.tester = static_cast<std::int16_t>(r);
    }
    std::vector<ContextTables> contexts(static_cast<std::size_t>(a.C));
    LoopFailure failed_context(a.C);
#pragma omp parallel for schedule(dynamic) if (a.C >= kParallelPlans)
    for (std::int64_t k = 0; k < a.C; ++k) {
      failed_context.guard(k, [&] { build_tables(a, pool, k, &contexts[static_cast<std::size_t>(k)]); });
    }
    TOPOROUTE_RETURN_IF_ERROR(failed_context.status("ctx_id", "context"));
    std::vector<Item> items(static_cast<std::size_t>(a.B));
    LoopFailure failed(a.B);
#pragma omp parallel for schedule(dynamic) if (a.B >= kParallelPlans)
    for (std::int64_t b = 0; b < a.B; ++b) {
      failed.guard(b, [&] {
        check_one(a.texts[b], contexts[static_cast<std::size_t>(a.ctx_index[b])], a, pool,
                  &items[static_cast<std::size_t>(b)]);
      });
    }
    TOPOROUTE_RETURN_IF_ERROR(failed.status("texts", "plan"));

    const auto B = static_cast<std::size_t>(a.B);
    ConductorBatch& o = *out;
    o = ConductorBatch{};
    o.error.resize(B);
    o.message.resize(B);
    o.yaml.resize(B);
    o.has_yaml.resize(B);
    o.nodes.assign(B, 0);
    o.edges.assign(B, 0);
    o.steps.assign(B, 0);
    o.depth.assign(B, 0);
    o.node_off.assign(B + 1, 0);
    o.warnings.resize(B);
    std::size_t N = 0, R = 0;
    for (const Item& it : items) {
      N += it.ids.size();
      R += it.ref_src.size();
    }
    o.node_role.reserve(N);
    o.node_step.reserve(N);
    o.node_layer.reserve(N);
    o.node_self.reserve(N);
    o.node_id.reserve(N);
    o.ref_off.reserve(N + 1);
    o.ref_off.push_back(0);
    o.ref_src.reserve(R);
    o.ref_cross.reserve(R);
    for (std::size_t b = 0; b < B; ++b) {
      Item& it = items[b];
      o.error[b] = it.error;
      o.message[b] = std::move(it.message);
      o.has_yaml[b] = it.has_yaml;
      if (it.error == kConductorOk) {
        const std::int64_t base = contexts[static_cast<std::size_t>(a.ctx_index[b])].base;
        o.nodes[b] = static_cast<std::int64_t>(it.ids.size());
        o.edges[b] = it.edges;
        o.steps[b] = it.n_steps;
        o.depth[b] = it.depth;
        std::size_t r = 0;
        for (std::size_t x = 0; x < it.ids.size(); ++x) {
          o.node_role.push_back(it.role[x]);
          o.node_step.push_back(it.step[x]);
          o.node_layer.push_back(it.layer[x]);
          o.node_self.push_back(it.self_src[x]);
          o.node_id.emplace_back(it.ids[x]);
          for (std::int64_t k = 0; k < it.ref_count[x]; ++k, ++r) {
            o.ref_src.push_back(it.ref_src[r]);
            o.ref_cross.push_back(it.ref_src[r] < base ? 1 : 0);
          }
          o.ref_off.push_back(static_cast<std::int64_t>(o.ref_src.size()));
        }
        o.warnings[b] = std::move(it.warnings);
      }
      o.node_off[b + 1] = static_cast<std::int64_t>(o.node_role.size());
      o.yaml[b] = std::move(it.yaml);  // after the ids, which view it
    }
  } catch (const std::bad_alloc&) {
    return Status::error(StatusCode::out_of_memory, "", "conductor_check: could not allocate the output tables");
  }
  return Status::success();
}

}  // namespace toporoute
