# engine/bindings/java/java.mk — the Java binding: build/wisp.jar (classes + libwispjni.so inside), its JUnit 5 specs, install; included by the Makefile.
#
#   make java            $(BUILD)/wisp.jar: the package `wisp` (engine/bindings/java/src) and the JNI
#                        library (engine/bindings/java/wisp_jni.c linked with libwisp.a) at
#                        wisp/native/linux-x86_64/libwispjni.so inside it, extracted and
#                        loaded at run time (Native.java)
#   make java-test       the JUnit 5 specs of spec/java (spec/java/run.sh; `make test` runs
#                        them through spec/run.sh)
#   make install         also puts wisp.jar under $(PREFIX)/share/java (when a JDK is present)
# Needs a JDK (javac, jni.h) and, for the specs, Debian's junit5; installed when missing
# (deps-java), as the Makefile's ensure_pkgs does for everything else.

JAVA_PKGS   := junit5
JAVAC       ?= javac
JAR         ?= jar
# recursive (=): read when the recipe runs, after deps-jdk may have installed the JDK
JAVA_HOME_J  = $(patsubst %/bin/javac,%,$(realpath $(shell command -v $(JAVAC) 2>/dev/null)))
JNI_CFLAGS   = -I$(JAVA_HOME_J)/include -I$(JAVA_HOME_J)/include/linux
JAVA_SRC    := $(wildcard engine/bindings/java/src/wisp/*.java)
JAVA_PLAT   := linux-$(shell uname -m)
JAVA_SHAREDIR := $(PREFIX)/share/java

.PHONY: java java-test deps-java deps-jdk install-java uninstall-java
java: $(BUILD)/wisp.jar

# a JDK when javac is missing (to build the jar), and junit5 for the specs
deps-java: deps-jdk
	$(call ensure_pkgs,$(JAVA_PKGS))
deps-jdk:
	@[ -n "$(WISP_SKIP_DEPS)" ] || command -v $(JAVAC) >/dev/null 2>&1 || { \
	  echo "wisp: installing Debian packages: default-jdk-headless"; \
	  if [ "$$(id -u)" != 0 ]; then echo "wisp: need root to install default-jdk-headless (or install a JDK yourself)" >&2; exit 1; fi; \
	  DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends default-jdk-headless >/dev/null; }

# the JNI library exports only the JNI entry points: libwisp.a's symbols stay inside it
$(BUILD)/java/libwispjni.so: engine/bindings/java/wisp_jni.c engine/include/wisp.h $(BUILD)/libwisp.a | deps-jdk
	@mkdir -p $(dir $@)
	@printf '{ global: Java_*; JNI_OnLoad; local: *; };\n' > $(BUILD)/java/jni.map
	$(CC) -std=c11 -D_GNU_SOURCE -fPIC -pthread $(WFLAGS) $(CFLAGS) -Iengine/include $(JNI_CFLAGS) -shared \
	  -Wl,--no-undefined -Wl,--version-script=$(BUILD)/java/jni.map -o $@ $< $(BUILD)/libwisp.a $(CUDA_LIBS) $(LDLIBS)

$(BUILD)/wisp.jar: $(JAVA_SRC) $(BUILD)/java/libwispjni.so
	@rm -rf $(BUILD)/java/classes && mkdir -p $(BUILD)/java/classes/wisp/native/$(JAVA_PLAT)
	$(JAVAC) --release 17 -Xlint:all -Werror -d $(BUILD)/java/classes $(JAVA_SRC)
	cp $(BUILD)/java/libwispjni.so $(BUILD)/java/classes/wisp/native/$(JAVA_PLAT)/libwispjni.so
	$(JAR) --create --file $@ -C $(BUILD)/java/classes .

java-test: deps-java $(BUILD)/wisp.jar $(BUILD)/wisp
	@WISP_BUILD=$(BUILD) sh spec/java/run.sh

# `make test` / `make test-gpu` build the jar first (spec/run.sh runs its specs); WISP_JAVA=0
# (a machine with no JDK and no package mirror, such as the GPU machine) skips both
ifneq ($(WISP_JAVA),0)
test test-gpu: deps-java $(BUILD)/wisp.jar
endif

install: install-java
uninstall: uninstall-java
install-java: all
	@if command -v $(JAVAC) >/dev/null 2>&1; then \
	  $(MAKE) --no-print-directory BUILD=$(BUILD) $(BUILD)/wisp.jar && \
	  install -d $(DESTDIR)$(JAVA_SHAREDIR) && \
	  install -m 644 $(BUILD)/wisp.jar $(DESTDIR)$(JAVA_SHAREDIR)/wisp-$(VERSION).jar && \
	  ln -sf wisp-$(VERSION).jar $(DESTDIR)$(JAVA_SHAREDIR)/wisp.jar; \
	else echo "install: no javac: wisp.jar not built nor installed"; fi
uninstall-java:
	rm -f $(DESTDIR)$(JAVA_SHAREDIR)/wisp-$(VERSION).jar $(DESTDIR)$(JAVA_SHAREDIR)/wisp.jar
