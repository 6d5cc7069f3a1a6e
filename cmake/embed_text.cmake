# Turns a text file into a C++ header holding it as one string constant, at build time:
#   cmake -DINPUT=file -DOUTPUT=header.hpp -DNAME=kName -DNAMESPACE=ns -P embed_text.cmake
# The text becomes a raw string literal; a file containing the literal's closing delimiter is
# refused, so any text embeds verbatim.
foreach(var INPUT OUTPUT NAME NAMESPACE)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "embed_text.cmake: -D${var}=... is required")
  endif()
endforeach()
file(READ "${INPUT}" text)
set(delimiter "ATTNLAB_EMBED")
string(FIND "${text}" ")${delimiter}\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "embed_text.cmake: ${INPUT} contains )${delimiter}\", the raw string's end")
endif()
get_filename_component(source "${INPUT}" NAME)
file(WRITE "${OUTPUT}"
  "// Generated at build time from ${source} by cmake/embed_text.cmake; edit ${source}, not this file.\n"
  "#pragma once\n\nnamespace ${NAMESPACE} {\n\ninline constexpr const char ${NAME}[] = R\"${delimiter}(${text})${delimiter}\";\n\n}\n")
