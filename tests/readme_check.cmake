# Fails unless README.md contains examples/quickstart.cpp verbatim, so the README's example is the
# one that is compiled and run.
file(READ ${README} readme)
file(READ ${EXAMPLE} example)
string(FIND "${readme}" "${example}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "README.md does not contain ${EXAMPLE} verbatim")
endif()
