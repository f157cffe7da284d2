# Sourced by the server process tests: sets $python to an interpreter that has pyzmq
# (Debian's python3-zmq installs it for the system interpreter, which a venv's python3
# first on PATH lacks).
python=python3
for candidate in /usr/bin/python3 python3; do
  if "$candidate" -c "import zmq" 2>/dev/null; then python=$candidate; break; fi
done
