# engine/bindings/cpp/cpp.mk — the C++ header wisp.hpp: its spec (spec/cpp/test_wisp_hpp.cpp) and its install; included by the Makefile.
#
#   make cpp-test      build $(BUILD)/test-cpp/test_wisp_hpp against libwisp.a and run it
#                      (spec/run.sh runs it in `make test`: "cpp: N passed, N failed")
#   make install       also installs wisp.hpp beside wisp.h
CXX      ?= c++
CXXFLAGS ?= -O2 -g

.PHONY: cpp-test install-cpp uninstall-cpp
$(BUILD)/test-cpp/test_wisp_hpp: spec/cpp/test_wisp_hpp.cpp engine/include/wisp.hpp engine/include/wisp.h $(BUILD)/libwisp.a
	@mkdir -p $(dir $@)
	$(CXX) -std=c++20 -Wall -Wextra -Wshadow $(CXXFLAGS) -Iengine/include -o $@ $< $(BUILD)/libwisp.a $(CUDA_LIBS) $(LDLIBS)

cpp-test: $(BUILD)/test-cpp/test_wisp_hpp $(BUILD)/wisp
	@$(BUILD)/test-cpp/test_wisp_hpp $(BUILD)/wisp

test test-gpu: $(BUILD)/test-cpp/test_wisp_hpp

install: install-cpp
uninstall: uninstall-cpp
install-cpp: all
	install -d $(DESTDIR)$(PREFIX)/include
	install -m 644 engine/include/wisp.hpp $(DESTDIR)$(PREFIX)/include/wisp.hpp
uninstall-cpp:
	rm -f $(DESTDIR)$(PREFIX)/include/wisp.hpp
