"""client/unicore_client/local"""
