"""client/unicore_client"""
