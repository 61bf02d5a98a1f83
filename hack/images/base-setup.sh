#!/bin/sh
# Runs inside the debootstrapped Debian bookworm root filesystem (buildah run, host network) and turns it into the
# stand-in for python:3.11.11-slim-bookworm, the base of Dockerfile.agent and Dockerfile.operator: Debian's
# python3.11 with `python`, `python3`, `pip`, `pip3` on PATH (/usr/local/bin), pip allowed to install system-wide,
# groupadd/useradd, CA certificates. Its text is part of the base image's input hash (hack/build-images.sh).
set -eu
PACKAGES="python3.11 python3 python3-pip ca-certificates netbase tzdata"

export DEBIAN_FRONTEND=noninteractive
# what a container image should never do at package install: start services
printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
chmod 0755 /usr/sbin/policy-rc.d
# the point release and its security updates, as the official images have
rm -f /etc/apt/sources.list
cat > /etc/apt/sources.list.d/debian.sources <<SOURCES
Types: deb
URIs: ${DEBIAN_MIRROR:-http://deb.debian.org/debian}
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: ${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
apt-get update -q
apt-get upgrade -y -q
# shellcheck disable=SC2086
apt-get install -y -q --no-install-recommends $PACKAGES
apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt/* /var/log/dpkg.log /var/log/alternatives.log

for name in python python3; do ln -sf /usr/bin/python3.11 "/usr/local/bin/$name"; done
for name in pip pip3; do ln -sf /usr/bin/pip3 "/usr/local/bin/$name"; done
# PEP 668: the official image's pip installs into the system interpreter; so must this one's
rm -f /usr/lib/python3*/EXTERNALLY-MANAGED
python --version
pip --version
