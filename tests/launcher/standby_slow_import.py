# A module that takes longer to import than the rendezvous's keep-alive timeout (3 s): standby_test.sh has the
# standby preload it (--preload), so a restart waits for a standby still importing, and its agent must keep
# beating meanwhile (a silent agent is declared dead).
import time

time.sleep(4.5)
