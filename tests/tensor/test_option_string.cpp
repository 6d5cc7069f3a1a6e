// The `name(option=value, ...)` grammar shared by attention specs and LR schedules
// (tensor/option_string.hpp): parsing, its errors, printing, and the number syntax.
#include <cmath>
#include <limits>

#include "helpers.hpp"
#include "tensor/option_string.hpp"

using namespace attnlab;
using namespace attnlab::testing;

TEST_CASE("parse_option_string: name alone, empty parentheses, options in the order written, spaces ignored") {
  OptionString a = parse_option_string("  mha ", "spec");
  CHECK(a.name == "mha");
  CHECK(a.options.empty());
  CHECK(parse_option_string("constant()", "spec").options.empty());
  OptionString b = parse_option_string(" talking_heads( heads = 8 ,logit_heads=4, parts=a+b ) ", "spec");
  CHECK(b.name == "talking_heads");
  REQUIRE(b.options.size() == 3);
  CHECK(b.options[0] == std::pair<std::string, std::string>{"heads", "8"});
  CHECK(b.options[1] == std::pair<std::string, std::string>{"logit_heads", "4"});
  CHECK(b.options[2] == std::pair<std::string, std::string>{"parts", "a+b"});
  CHECK(parse_option_string("", "spec").name.empty());  // the caller reports the missing name
}

TEST_CASE("format_option_string prints what parse_option_string reads back") {
  OptionString s{"warmup_cosine", {{"warmup", "3"}, {"total", "7"}}};
  CHECK(format_option_string(s) == "warmup_cosine(warmup=3, total=7)");
  CHECK(format_option_string(s, ",") == "warmup_cosine(warmup=3,total=7)");
  CHECK(format_option_string({"fnet", {}}) == "fnet");
  OptionString back = parse_option_string(format_option_string(s), "spec");
  CHECK(back.name == s.name);
  CHECK(back.options == s.options);
}

TEST_CASE("parse_option_string errors start with `what` and the text, and name the defect") {
  auto err = [](const char* text) { return error_of([&] { parse_option_string(text, "my spec"); }); };
  CHECK(err("mha(heads=2") == "my spec \"mha(heads=2\": missing ')' at the end; expected name(option=value, ...)");
  CHECK(err("mha(heads=2)x").find("missing ')'") != std::string::npos);
  CHECK(err("mha(2)") == "my spec \"mha(2)\": '2' is not of the form option=value");
  CHECK(err("mha(heads=2,)") == "my spec \"mha(heads=2,)\": '' is not of the form option=value");
  CHECK(err("mha(2x=1)") == "my spec \"mha(2x=1)\": '2x' is not an option name");
  CHECK(err("mha(heads=)") == "my spec \"mha(heads=)\": option 'heads' has an empty value");
  CHECK(err("mha(heads=2, heads=3)") == "my spec \"mha(heads=2, heads=3)\": option 'heads' given twice");
  CHECK_THROWS_AS(parse_option_string("mha(heads=2", "x"), ValueError);
}

TEST_CASE("is_identifier, parse_integer, parse_number and format_number") {
  CHECK(is_identifier("talking_heads"));
  CHECK(is_identifier("_a1"));
  CHECK_FALSE(is_identifier(""));
  CHECK_FALSE(is_identifier("1a"));
  CHECK_FALSE(is_identifier("a-b"));
  CHECK(parse_integer("-42") == -42);
  CHECK_FALSE(parse_integer("4.0"));
  CHECK_FALSE(parse_integer("4 "));
  CHECK_FALSE(parse_integer(""));
  CHECK(parse_number("1e3") == 1000.0);
  CHECK(parse_number("-0.25") == -0.25);
  CHECK_FALSE(parse_number("abc"));
  CHECK_FALSE(parse_number("1.5x"));
  CHECK_FALSE(parse_number(""));
  // The shortest form, read back exactly.
  CHECK(format_number(0.1) == "0.1");
  CHECK(format_number(1e-6) == "1e-06");
  CHECK(format_number(2.0) == "2");
  CHECK(format_number(1e21) == "1e21");  // no '+': it is the list separator of spec options
  CHECK(format_number(-1e300) == "-1e300");
  for (double v : {1.0 / 3, 0.999, -0.1, 1e-300, 123456789.123, std::numeric_limits<double>::max(),
                   std::numeric_limits<double>::denorm_min(), 0.33f + 0.0, 1e21, 1e21 + 0.5, -2.5e100}) {
    CAPTURE(v);
    CHECK(parse_number(format_number(v)) == v);
  }
}
